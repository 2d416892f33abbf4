"""Where a speculative step's time goes, from each engine's own timers (for ci/bench.py).

- vLLM: its torch profiler (``/start_profile``; the "bench" server sets
  VLLM_CUSTOM_SCOPES_FOR_PROFILING, so the model runner's step scopes are recorded):
  "gpu_model_runner: forward" is the target over the verify window, "gpu_model_runner: draft"
  the drafter (with LiLiCorr's head and walk).
- SGLang: its ``/start_profile`` traces, in which sglang_dspark makes DSPARK's own step
  segments scopes on CPU: "dspark: target_verify" and "dspark: draft".
- llama.cpp: common_speculative's draft timer (``dur(b,g,a)`` at ``-lv 4``) and, for the
  verify window, llama-server's prompt timer over that many new tokens after a cached prefix, on
  the server without speculation (ci/llamacpp_steps.py's ``verify_ms``).
A profiler slows what it records, so profiled times are scaled by the ratio of the decode time
per token without and with the profiler, on the same prompts.
"""

from __future__ import annotations

import gzip
import json
import statistics
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Callable

from llamacpp_steps import statistics_of
from tests.conformance.drivers.base import PROFILES, EngineProcess

SCOPES = {"vllm": ("gpu_model_runner: draft", "gpu_model_runner: forward"),
          "sglang": ("dspark: draft", "dspark: target_verify")}


def _post(url: str, body: dict | None = None) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=600).read()


def _scope_means(trace: Path, names: tuple[str, ...]) -> dict[str, float]:
    """Mean duration (ms) of each named scope in a Chrome trace."""
    events = json.loads(gzip.open(trace).read() if trace.suffix == ".gz" else trace.read_text())
    durations: dict[str, list[float]] = defaultdict(list)
    for event in events["traceEvents"] if isinstance(events, dict) else events:
        if event.get("ph") == "X" and event.get("name") in names:
            durations[event["name"]].append(event["dur"] / 1000)
    missing = [n for n in names if not durations[n]]
    if missing:
        raise RuntimeError(f"{trace}: no {missing} scopes; was the server started as 'bench'?")
    return {n: statistics.mean(durations[n]) for n in names}


def profiled_split(engine_name: str, engine: EngineProcess,
                   run: Callable[[], float]) -> tuple[float, float, float]:
    """(draft ms, verify ms, TPOT ms under the profiler): the engine's profiler around ``run``
    (which sends requests and returns their mean time per output token)."""
    folder = PROFILES / engine_name
    folder.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if engine_name == "vllm":
        _post(engine.url + "/start_profile")
    else:
        _post(engine.url + "/start_profile", {"output_dir": str(folder), "activities": ["CPU"],
                                              "with_stack": False, "record_shapes": False})
    tpot = run()
    _post(engine.url + "/stop_profile")
    deadline = time.time() + 120
    while True:  # traces are written after stop_profile returns
        traces = [p for p in folder.rglob("*.json*") if p.stat().st_mtime >= started
                  and "async_llm" not in p.name]
        if traces or time.time() > deadline:
            break
        time.sleep(1)
    if not traces:
        raise RuntimeError(f"{engine_name}: the profiler wrote no trace in {folder}")
    time.sleep(2)  # let the writer finish
    draft, verify = SCOPES[engine_name]
    means = _scope_means(max(traces, key=lambda p: p.stat().st_mtime), SCOPES[engine_name])
    return means[draft], means[verify], tpot


def llamacpp_draft_ms(engine: EngineProcess) -> float:
    """common_speculative's mean draft time per call, from the server's log (-lv 4)."""
    stats = statistics_of(engine.log_path.read_text(errors="replace"))
    if stats is None or not stats["drafts"]:
        raise RuntimeError(f"{engine.name}: no speculative statistics in {engine.log_path}")
    return stats["draft_ms"] / stats["drafts"]
