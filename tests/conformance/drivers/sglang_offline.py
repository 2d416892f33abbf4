"""SGLang's offline `Engine` (sglang 0.5.23 with sglang_dspark) as a conformance engine: the
server driver's arguments and requests, handed to `Engine(...)` and `Engine.generate` in a host
process instead of launch_server and /generate."""

from __future__ import annotations

from ..scenarios import Scenario
from .base import Method
from .offline import OfflineEngine
from .sglang import ENV, PYTHON, SglangDriver, server_args


class SglangOfflineDriver(SglangDriver):
    engine = "sglang-offline"

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        if scenario.mode == "concurrent":
            return "concurrent clients are a server's: launch_server runs this scenario"
        if scenario.config != "default" or scenario.family != "qwen3":
            return ("the offline driver runs the Qwen3 text scenarios; this target runs through "
                    "launch_server (the same model path, and CI time is bounded)")
        return super().unavailable(scenario, method)

    def start(self, config: str, family: str, method: Method) -> OfflineEngine:
        return OfflineEngine(f"sglang-offline-{config}-{family}-{method.name}", str(PYTHON),
                             "tests.conformance.drivers.sglang_offline_host",
                             server_args(config, family, method, port=None), method, ENV)

    def busy_requests(self, engine: OfflineEngine) -> int:
        return 0  # `generate` returns when every request has finished

    @staticmethod
    def _generate(engine: OfflineEngine, payload: dict):
        # /generate's "text" is Engine.generate's "prompt"; the other fields keep their names
        call = {("prompt" if key == "text" else key): value for key, value in payload.items()}
        return engine.request(call)["result"]

    @staticmethod
    def _retracted(engine: OfflineEngine) -> float:
        return 0.0  # only tiny_kv needs it, and that scenario is a server's
