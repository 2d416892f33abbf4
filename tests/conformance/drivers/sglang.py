"""`python -m sglang.launch_server` (sglang 0.5.23 with sglang_dspark, on CPU) as a
conformance engine."""

from __future__ import annotations

import base64

from ..compare import Counters, Output
from ..prompts import Request
from ..scenarios import Scenario
from .base import FIXTURES, REPO, Driver, EngineProcess, Method, free_port, http_json

PYTHON = REPO / ".venvs" / "sglang" / "bin" / "python"
# fp32 weights, activations and LFM2 conv states (SGLang keeps those in bf16 by default, which
# rounds decode and verify differently); radix (prefix) cache on; small prefill chunks
ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32"}
COMMON_ARGS = ["--device", "cpu", "--dtype", "float32", "--max-total-tokens", "8192",
               "--chunked-prefill-size", "64", "--decode-log-interval", "1", "--random-seed", "0"]
TINY_KV_TOKENS = 640  # enough for any one request, too few for 8 at once: SGLang retracts


class SglangDriver(Driver):
    engine = "sglang"
    vision_family = "lfm2_vl"
    methods = (Method("DSPARK", "dspark", ours=True, max_draft=9),)

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        family = self.family(scenario)
        if not (FIXTURES / family / "target").exists():
            return f"no {family} fixture"
        return None

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        port = free_port()
        argv = [str(PYTHON), "-m", "sglang.launch_server", *COMMON_ARGS, "--host", "127.0.0.1",
                "--port", str(port), "--model-path", str(FIXTURES / family / "target")]
        if config == "tiny_kv":
            argv[argv.index("--max-total-tokens") + 1] = str(TINY_KV_TOKENS)
        if method.drafter:
            drafter_family = "lfm2" if family == "lfm2_vl" else family
            # the documented command; on CPU the plugin maps flashinfer to the CPU backend
            argv += ["--speculative-algorithm", method.name,
                     "--speculative-draft-model-path", str(FIXTURES / drafter_family / method.drafter),
                     "--speculative-draft-attention-backend", "flashinfer",
                     "--speculative-dspark-block-size", str(method.max_draft)]
        return EngineProcess(f"sglang-{config}-{family}-{method.name}", argv, port, "/health",
                             method, ENV)

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        sampling = {"max_new_tokens": scenario.max_tokens, "temperature": scenario.temperature,
                    "sampling_seed": 1234}
        if scenario.temperature == 0.0:
            sampling["top_k"] = 1
        if scenario.stop:
            sampling["stop"] = list(scenario.stop)
        payload: dict = {"sampling_params": sampling}
        if request.image is not None:
            payload["text"] = "<image>" + request.prompt_text
            payload["image_data"] = ("data:image/png;base64,"
                                     + base64.b64encode(request.image.read_bytes()).decode())
        else:
            payload["input_ids"] = list(request.prompt_ids)
        if want_top2:
            payload.update(return_logprob=True, top_logprobs_num=2, logprob_start_len=-1)
        body = http_json(engine.url + "/generate", payload)
        meta = body["meta_info"]
        top2 = ([[entry[0] for entry in position] for position in meta["output_top_logprobs"]]
                if want_top2 else None)
        verify_steps = meta.get("spec_verify_ct", 0)
        # SGLang's acceptance length is completion_tokens / spec_verify_ct; these counters
        # give the same 1 + accepted / drafts.
        counters = Counters(verify_steps, verify_steps * engine.method.max_draft,
                            meta["completion_tokens"] - verify_steps) if verify_steps else Counters()
        finish = meta.get("finish_reason") or {}
        return Output(body["output_ids"], top2, finish.get("type", "")), counters
