"""llama-server (the pinned llama.cpp with llamacpp_patches) as a conformance engine."""

from __future__ import annotations

import base64
import re
import time

from ..compare import Counters, Output
from ..prompts import Request
from ..scenarios import Scenario
from .base import BASELINE, FIXTURES, REPO, Driver, EngineProcess, Method, free_port, http_json, http_text

LLAMA_SERVER = REPO / "build" / "llama.cpp" / "build" / "bin" / "llama-server"
GGUF = FIXTURES / "gguf"


class LlamaCppDriver(Driver):
    engine = "llamacpp"
    vision_family = "lfm2_vl"
    server_wide_counters = True
    methods = (
        Method("draft-dflash", "dflash", ours=False, max_draft=7),
        Method("draft-dflash-lilicorr", "lilicorr", ours=True, max_draft=7),
        Method("draft-dspark", "dspark", ours=True, max_draft=8),
    )

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        if scenario.config == "tiny_kv":
            return ("llama-server does not preempt: each slot owns a fixed share of the context, "
                    "so there is no preemption to exercise")
        family = self.family(scenario)
        if method.drafter and not (GGUF / f"{self._drafter_family(family)}-{method.drafter}.gguf").exists():
            return f"no {method.drafter} GGUF for the {family} fixtures"
        return None

    @staticmethod
    def _drafter_family(family: str) -> str:
        # the LFM2-VL target's language model is the LFM2 fixture target: its drafters serve both
        return "lfm2" if family == "lfm2_vl" else family

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        port = free_port()
        argv = [str(LLAMA_SERVER), "-m", str(GGUF / f"{family}-target.gguf"),
                "--host", "127.0.0.1", "--port", str(port), "-t", "2", "-c", "8192", "-np", "4",
                "-b", "64", "-ub", "64", "--no-warmup", "--metrics",
                # f32 KV caches and no flash attention: the target's numerics are then the same
                # whether it decodes one token or verifies a block (exact greedy comparisons)
                "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32", "-fa", "off"]
        if config == "vision":
            argv += ["--mmproj", str(GGUF / f"{family}-mmproj.gguf")]
        drafter = GGUF / f"{self._drafter_family(family)}-{method.drafter}.gguf"
        if method.name == "draft-dflash":
            argv += ["--spec-type", "draft-dflash", "-md", str(drafter), "--spec-draft-n-max", "7"]
        elif method.name == "draft-dflash-lilicorr":
            argv += ["--spec-type", "draft-dflash", "--spec-draft-model", str(drafter)]
        elif method.name == "draft-dspark":
            argv += ["-md", str(drafter), "--spark-block-size", str(method.max_draft)]
        return EngineProcess(f"llamacpp-{config}-{family}-{method.name}", argv, port, "/health", method)

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        if request.image is not None:
            # the server picks its media marker at start-up and tells it in /props
            marker = http_json(engine.url + "/props")["media_marker"]
            prompt = {"prompt_string": f"{marker}{request.prompt_text}",
                      "multimodal_data": [base64.b64encode(request.image.read_bytes()).decode()]}
        else:
            prompt = list(request.prompt_ids)
        payload = {"prompt": prompt, "n_predict": scenario.max_tokens, "seed": 1234,
                   "temperature": scenario.temperature, "cache_prompt": True, "return_tokens": True,
                   "stop": list(scenario.stop)}
        if scenario.temperature == 0.0:
            payload["top_k"] = 1
        if want_top2:
            payload["n_probs"] = 2
        body = http_json(engine.url + "/completion", payload)
        top2 = None
        if want_top2:
            top2 = [[t["logprob"] for t in p["top_logprobs"]]
                    for p in body.get("completion_probabilities", [])]
        return Output(body["tokens"], top2, body.get("stop_type", "")), Counters()

    def counters(self, engine: EngineProcess) -> Counters:
        """/metrics settles once the last slot has been released."""
        previous = None
        while True:
            text = http_text(engine.url + "/metrics")
            values = {name: int(float(m.group(1))) for name in
                      ("drafts", "draft_tokens", "accepted_tokens")
                      if (m := re.search(rf"^llamacpp:spec_decode_num_{name}_total (\S+)$", text, re.M))}
            current = Counters(values.get("drafts", 0), values.get("draft_tokens", 0),
                               values.get("accepted_tokens", 0))
            if current == previous:
                return current
            previous = current
            time.sleep(0.3)


__all__ = ["LlamaCppDriver", "BASELINE"]
