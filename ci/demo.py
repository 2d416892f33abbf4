"""The main job: our users' four documented commands, run on the built-in fixtures.

Each command is started as users write it (fixture paths filled in), next to the same server
without speculation; the same short prompt set goes through the OpenAI-compatible API of both
(streamed, one request at a time), and one table compares them: outputs identical, acceptance
length (the engine's own counters), decode tokens/s with and without speculation (first text to
last, prefill left out), and the speedup's bound AL x T_step / (T_draft + T_verify) with the
efficiency against it (T_step: the server without speculation's decode time per token; T_draft
and T_verify: the engine's own timers, ci/step_times.py, switched on beside the documented
arguments). The text commands
serve the benchmark family (qwen3_bench: fixtures/REPORT.md), the image command LFM2-VL. Outputs that
differ get the verdict of the float32 reference (blockdraft/verdict.py): a near-tie of the
target's logits is listed, speculation departing where the target is sure is a BUG. Exits non-zero
on a bug (an image prompt that differs counts as one: it has no reference) or when a speculative
server accepted nothing. A command whose engine or fixture is missing shows as "not available"
with the reason.

    .venvs/core/bin/python ci/demo.py          (ci/demo.sh sets everything up first)
"""

from __future__ import annotations

import base64
import json
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from blockdraft.verdict import reference_for  # noqa: E402
from tests.conformance.client import Streamed, stream  # noqa: E402
from tests.conformance.drivers.base import (  # noqa: E402
    BASELINE, FIXTURES, PROFILES, EngineProcess, free_port, http_json)
from tests.conformance.drivers.llamacpp import LLAMA_SERVER, LlamaCppDriver  # noqa: E402
from tests.conformance.drivers.sglang import (  # noqa: E402
    COMPLETE_ACCEPT_LENGTH, ENV as SGLANG_ENV, PYTHON as SGLANG_PYTHON)
from tests.conformance.drivers.vllm import ENV as VLLM_ENV, VLLM, VllmDriver  # noqa: E402
from tests.conformance.prompts import prompt_set, text_ids, tokenizer  # noqa: E402
import llamacpp_steps  # noqa: E402
from step_times import llamacpp_draft_ms, profiled_split  # noqa: E402

GGUF = FIXTURES / "gguf"
MAX_TOKENS = 64
FAMILY = "qwen3_bench"  # the text commands' fixtures: the benchmark family
PROFILED_PROMPTS = 2  # prompts sent again under vLLM's or SGLang's profiler
# vLLM and SGLang serve float32 checkpoints in bfloat16 / float16 under --dtype auto; the
# fixtures are served in their own dtype, as users' bf16 checkpoints are, so that the verdicts
# compare float32 runs with the float32 reference (in float16 SGLang's top1-top2 gaps are up
# to 0.013 off the reference's, past NEAR_TIE_EPSILON; in float32 2e-5)
FIXTURE_DTYPE = ["--dtype", "float32"]


@dataclass
class Demo:
    engine: str
    command: str                                   # the documented command, as users write it
    argv: Callable[[bool, int], list[str]]         # (speculative, port) -> argv
    acceptance_length: Callable[[EngineProcess], float]  # from the engine's own counters
    needs: list[Path]
    env: dict[str, str] = field(default_factory=dict)
    image: bool = False
    reference: Path = FIXTURES / FAMILY / "target"  # the float32 target its verdicts use
    timers: str = "llamacpp"                       # whose step timers (ci/step_times.py)
    window: int = 8                                # the verify window: drafted tokens + 1


@dataclass
class Row:
    engine: str
    command: str
    status: str = ""
    identical: str = ""
    verdicts: list[str] = field(default_factory=list)  # one per differing prompt
    bugs: int = 0
    acceptance_length: float = 0.0
    tps_base: float = 0.0
    tps_spec: float = 0.0
    t_draft_ms: float = 0.0
    t_verify_ms: float = 0.0

    @property
    def bound(self) -> float:
        """AL x T_step / (T_draft + T_verify), T_step = 1 / decode tokens per second without."""
        parts = self.t_draft_ms + self.t_verify_ms
        return self.acceptance_length * 1000 / self.tps_base / parts if parts and self.tps_base else 0.0


def prompts_text() -> list[str]:
    return [tokenizer().decode(list(r.prompt_ids)) for r in prompt_set("in_domain")]


def judge(demo: Demo, row: Row, base: list[Streamed], spec: list[Streamed]) -> None:
    """The reference's verdict on every prompt whose outputs differ (texts re-tokenised)."""
    for i, (a, b) in enumerate(zip(base, spec)):
        if a.text == b.text:
            continue
        if demo.image:
            row.verdicts.append(f"prompt {i}: differs (image prompt: no float32 reference)")
            row.bugs += 1
            continue
        verdict = reference_for(demo.reference).judge(text_ids(prompts_text()[i]),
                                                      text_ids(a.text), text_ids(b.text))
        row.verdicts.append(f"prompt {i}: {verdict}")
        row.bugs += verdict.is_bug or verdict.kind == "identical"


def payloads(demo: Demo) -> tuple[str, list[dict]]:
    common = {"model": "target", "max_tokens": MAX_TOKENS, "temperature": 0}
    if not demo.image:
        return "/v1/completions", [{**common, "prompt": p} for p in prompts_text()]
    requests = []
    for r in prompt_set("image"):
        url = "data:image/png;base64," + base64.b64encode(r.image.read_bytes()).decode()
        content = [{"type": "image_url", "image_url": {"url": url}},
                   {"type": "text", "text": r.prompt_text}]
        requests.append({**common, "messages": [{"role": "user", "content": content}]})
    return "/v1/chat/completions", requests


def vllm_demo() -> Demo:
    target, drafter = FIXTURES / FAMILY / "target", FIXTURES / FAMILY / "lilicorr"
    config = {"method": "lilicorr", "model": str(drafter), "num_speculative_tokens": 7}
    profiler = {"profiler": "torch", "torch_profiler_dir": str(PROFILES / "vllm"),
                "torch_profiler_with_stack": False}

    def argv(spec: bool, port: int) -> list[str]:
        args = [str(VLLM), "serve", str(target), "--served-model-name", "target", "--port", str(port),
                *FIXTURE_DTYPE, "--profiler-config", json.dumps(profiler)]
        return args + (["--speculative-config", json.dumps(config)] if spec else [])
    return Demo("vLLM", f"vllm serve TARGET --speculative-config '{json.dumps(config)}'"
                "  (+ --dtype float32 and the profiler here)", argv,
                lambda e: VllmDriver().counters(e).acceptance_length, [VLLM, target, drafter],
                {**VLLM_ENV, "VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}, timers="vllm")


def sglang_demo() -> Demo:
    target, drafter = FIXTURES / FAMILY / "target", FIXTURES / FAMILY / "dspark"
    spec_args = ["--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(drafter),
                 "--speculative-draft-attention-backend", "flashinfer",
                 "--speculative-dspark-block-size", "9"]

    def argv(spec: bool, port: int) -> list[str]:
        args = [str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--model-path", str(target),
                "--device", "cpu", "--port", str(port), "--served-model-name", "target",
                *FIXTURE_DTYPE, *COMPLETE_ACCEPT_LENGTH]
        return args + (spec_args if spec else [])

    def acceptance_length(engine: EngineProcess) -> float:
        state = http_json(engine.url + "/server_info")["internal_states"][0]
        return float(state.get("avg_spec_accept_length") or 0.0)
    command = ("python -m sglang.launch_server --model-path TARGET "
               + shlex.join(spec_args).replace(str(drafter), "DRAFTER")
               + "  (+ --device cpu --dtype float32, the profiler and --decode-log-interval 1 "
               "for a complete acceptance length here)")
    return Demo("SGLang", command, argv, acceptance_length, [SGLANG_PYTHON, target, drafter],
                {**SGLANG_ENV, "SGLANG_TORCH_PROFILER_DIR": str(PROFILES / "sglang")},
                timers="sglang", window=10)


def llamacpp_lilicorr_demo() -> Demo:
    target, drafter = GGUF / f"{FAMILY}-target.gguf", GGUF / f"{FAMILY}-lilicorr.gguf"

    def argv(spec: bool, port: int) -> list[str]:
        args = [str(LLAMA_SERVER), "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
                "--metrics", "-lv", "4"]
        return args + (["--spec-type", "draft-dflash", "--spec-draft-model", str(drafter)] if spec else [])
    return Demo("llama.cpp", 'llama-server -m "$BOLT_GGUF" --spec-type draft-dflash '
                '--spec-draft-model "$LILICORR_GGUF" --host 127.0.0.1  (+ -lv 4 for the draft timer)', argv,
                lambda e: LlamaCppDriver().counters(e).acceptance_length, [LLAMA_SERVER, target, drafter])


def llamacpp_dspark_vision_demo() -> Demo:
    target, mmproj = GGUF / "lfm2_vl-target.gguf", GGUF / "lfm2_vl-mmproj.gguf"
    drafter = GGUF / "lfm2-dspark.gguf"

    def argv(spec: bool, port: int) -> list[str]:
        args = [str(LLAMA_SERVER), "-m", str(target), "--mmproj", str(mmproj), "--port", str(port),
                "--metrics", "-lv", "4"]
        return args + (["-md", str(drafter), "--spark-block-size", "8"] if spec else [])
    return Demo("llama.cpp", "llama-server -m TARGET.gguf --mmproj MMPROJ.gguf -md DSPARK.gguf "
                "--spark-block-size 8  (LFM2-VL, image prompts; + -lv 4)", argv,
                lambda e: LlamaCppDriver().counters(e).acceptance_length,
                [LLAMA_SERVER, target, mmproj, drafter], image=True,
                reference=FIXTURES / "lfm2_vl/target", window=9)


def _starting(label: str, done: threading.Event) -> None:
    started = time.time()
    while not done.wait(5):
        print(f"    ... {label}: starting ({time.time() - started:.0f} s)", flush=True)


def ms_per_token(results: list[Streamed]) -> float:
    """Decode time per output token (ms), first text to last as `vllm bench serve`'s TPOT (the
    prefill, which speculation does not speed up, left out), over all requests together: an
    answer that stops at EOS after a few tokens is one or two steps, too few to weigh alone."""
    decoding = [r for r in results if r.tokens > 1]
    return (1000 * sum(r.seconds - r.ttft for r in decoding)
            / sum(r.tokens - 1 for r in decoding))


def step_parts(demo: Demo, engine: EngineProcess, spec: bool, row: Row, endpoint: str,
               requests: list[dict], results: list[Streamed]) -> None:
    """The engine's own timings of a step's parts, into the row (see ci/step_times.py)."""
    if demo.timers == "llamacpp":
        if spec:
            row.t_draft_ms = llamacpp_draft_ms(engine)
        else:
            ids = [list(r.prompt_ids) for r in prompt_set("in_domain24")[:4]]
            row.t_verify_ms = llamacpp_steps.verify_ms(engine, ids, demo.window)
    elif spec:
        def profiled_ms_per_token() -> float:
            return ms_per_token([stream(engine.url + endpoint, r) for r in requests[:PROFILED_PROMPTS]])
        draft, verify, profiled = profiled_split(demo.timers, engine, profiled_ms_per_token)
        # the profiler's own cost taken out: the same prompts, so the same acceptance
        scale = ms_per_token(results[:PROFILED_PROMPTS]) / profiled
        row.t_draft_ms, row.t_verify_ms = draft * scale, verify * scale


def serve_and_ask(demo: Demo, spec: bool, row: Row) -> tuple[list[Streamed], float]:
    label = f"{demo.engine} {'with' if spec else 'without'} speculation"
    port = free_port()
    engine = EngineProcess(f"demo-{demo.engine}-{'spec' if spec else 'base'}", demo.argv(spec, port),
                           port, "/health", BASELINE, demo.env)
    done = threading.Event()
    threading.Thread(target=_starting, args=(label, done), daemon=True).start()
    try:
        with engine:
            done.set()
            print(f"    {label}: serving, sending prompts", flush=True)
            endpoint, requests = payloads(demo)
            results = [stream(engine.url + endpoint, r) for r in requests]
            acceptance_length = demo.acceptance_length(engine)  # before the timers' requests
            step_parts(demo, engine, spec, row, endpoint, requests, results)
            return results, acceptance_length
    finally:
        done.set()


def run(demo: Demo) -> Row:
    row = Row(demo.engine, demo.command)
    missing = [str(p.relative_to(REPO)) for p in demo.needs if not p.exists()]
    if missing:
        row.status = f"not available: missing {', '.join(missing)} (run ci/setup.sh)"
        return row
    print(f"== {demo.engine}: {demo.command}", flush=True)
    try:
        base, _ = serve_and_ask(demo, spec=False, row=row)
        spec, acceptance_length = serve_and_ask(demo, spec=True, row=row)
    except Exception as exc:
        row.status = f"failed: {str(exc).splitlines()[0][:200]}"
        return row
    same = sum(a.text == b.text for a, b in zip(base, spec))
    row.identical = "yes" if same == len(base) else f"no ({same}/{len(base)})"
    judge(demo, row, base, spec)
    row.acceptance_length = round(acceptance_length, 2)
    row.tps_base, row.tps_spec = 1000 / ms_per_token(base), 1000 / ms_per_token(spec)
    row.status = "ok" if not row.bugs and row.acceptance_length > 1 else "FAILED"
    return row


def main() -> int:
    demos = [vllm_demo(), sglang_demo(), llamacpp_lilicorr_demo(), llamacpp_dspark_vision_demo()]
    rows = [run(d) for d in demos]
    print("\n| engine | documented command | outputs identical | acceptance length | "
          "decode tok/s without | with | speedup | bound | efficiency | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        measured = r.tps_base > 0
        speedup = r.tps_spec / r.tps_base if measured else 0.0
        ratio = f"{speedup:.2f}x" if measured else ""
        tps = f"{r.tps_base:.0f} | {r.tps_spec:.0f}" if measured else " | "
        bound = f"{r.bound:.2f}x | {speedup / r.bound:.2f}" if r.bound else " | "
        print(f"| {r.engine} | `{r.command}` | {r.identical} | {r.acceptance_length or ''} | "
              f"{tps} | {ratio} | {bound} | {r.status} |")
    print("\nbound = AL x T_step / (T_draft + T_verify), the speedup a step's measured parts allow "
          "(T_step = 1 / decode tok/s without speculation); efficiency = speedup / bound.")
    for r in rows:
        for verdict in r.verdicts:
            print(f"- {r.engine} `{r.command}`: {verdict}")
    failed = [r for r in rows if r.status == "FAILED" or r.status.startswith("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
