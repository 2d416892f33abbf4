"""Side-by-side benchmark: per engine, on the same fixtures and prompts, in one run, no
speculation, the engine's DFlash control and our method, at concurrency 1 and 4, on the
benchmark family (fixtures/REPORT.md) by default, each server as it is served for speed (vLLM
with torch.compile; the drivers' "bench" configuration); where the engine can choose each
step's drafted length from its own costs (llama.cpp's --spec-draft-cost-aware, vllm_lilicorr's
"cost_aware": true), every command again with that option, the drafted tokens per step beside
the acceptance length.

Load and latency come from vLLM's own benchmark client (`vllm bench serve`, OpenAI completions
API, which all three engines serve); acceptance from each engine's own counters (Prometheus
/metrics for vLLM and llama.cpp, /server_info for SGLang); peak memory from the server
processes' VmHWM; the acceptance rate at each draft position where the engine counts it (vLLM).
Every figure is also given as a ratio to the no-speculation row of the same
engine and concurrency. At concurrency 1 each speculative row also gets the bound its step
times allow, AL x T_step / (T_draft + T_verify), and its efficiency (speedup / bound): T_step is
the no-speculation server's time per output token, T_draft and T_verify come from the engine's
own timers (ci/step_times.py). Outputs at concurrency 1 are compared with the no-speculation run's and
any difference gets the float32 reference's verdict (blockdraft/verdict.py), listed in the report;
the command exits non-zero on a bug (speculation departing where the target is sure). Writes reports/bench/bench.{json,md,png}.

    .venvs/core/bin/python ci/bench.py [--engines vllm,sglang,llamacpp] [--prompts 8]
        [--family qwen3_bench]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conformance.drivers.base import BASELINE, FIXTURES, Driver, EngineProcess, Method  # noqa: E402
from tests.conformance.drivers.llamacpp import LlamaCppDriver  # noqa: E402
from tests.conformance.drivers.sglang import SglangDriver  # noqa: E402
from tests.conformance.drivers.vllm import VllmDriver  # noqa: E402
from blockdraft.verdict import reference_for  # noqa: E402
from tests.conformance.prompts import prompt_set, text_ids, tokenizer  # noqa: E402
import llamacpp_steps  # noqa: E402
from step_times import llamacpp_draft_ms, profiled_split  # noqa: E402

OUT = REPO / "reports" / "bench"
VLLM_BENCH = REPO / ".venvs" / "vllm" / "bin" / "vllm"
DRIVERS = {"vllm": VllmDriver, "sglang": SglangDriver, "llamacpp": LlamaCppDriver}
OUTPUT_TOKENS = 128
PROFILED_PROMPTS = 2  # requests run under the profiler, at concurrency 1


@dataclass
class Measurement:
    engine: str
    method: str
    ours: bool
    concurrency: int
    acceptance_length: float
    max_draft: int
    cost_aware: bool                   # the engine chose each step's drafted length
    decode_tokens_per_second: float    # 1 / mean TPOT (one request) or output throughput
    mean_ttft_ms: float
    mean_tpot_ms: float
    peak_memory_mb: float
    # accepted / drafts at each draft position (empty where the engine reports totals only)
    acceptance_per_position: list[float] = field(default_factory=list)
    drafted_per_step: float = 0.0      # drafted tokens per verification (where counted)
    speedup: float = 1.0               # decode tokens/s over the no-speculation row
    ttft_ratio: float = 1.0
    memory_ratio: float = 1.0
    # concurrency 1: each prompt's output as generated, and the verdicts on those that differ
    # from the no-speculation row's
    generated_texts: list[str] = field(default_factory=list, repr=False)
    verdicts: list[str] = field(default_factory=list)
    # concurrency 1, speculative rows: one step's parts (ms) and the bound they allow
    t_step_ms: float = 0.0
    t_draft_ms: float = 0.0
    t_verify_ms: float = 0.0
    bound: float = 0.0
    efficiency: float = 0.0
    # llama.cpp's no-speculation row: a target forward over each verify window (ms)
    verify_ms_by_window: dict[int, float] = field(default_factory=dict)


def peak_memory_mb(engine: EngineProcess) -> float:
    """Sum of VmHWM over the server's session (it runs in its own; vLLM and SGLang fork)."""
    total_kb = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) != engine.process.pid:  # field 6 of stat: the session id
                continue
            status = (stat.parent / "status").read_text()
        except (OSError, IndexError, ValueError):
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines()
                          if line.startswith("VmHWM:")), 0)
    return total_kb / 1024


def prompt_texts(count: int) -> list[str]:
    requests = [r for name in ("in_domain", "mixed8") for r in prompt_set(name)][:count]
    return [tokenizer().decode(list(r.prompt_ids)) for r in requests]


def write_prompts(path: Path, count: int) -> None:
    path.write_text("".join(json.dumps({"prompt": text, "output_tokens": OUTPUT_TOKENS}) + "\n"
                            for text in prompt_texts(count)))


def vllm_bench(engine: EngineProcess, prompts: Path, count: int, concurrency: int,
               family: str, run: str = "") -> dict:
    result = OUT / f"raw-{engine.name}-c{concurrency}{run}.json"
    subprocess.run([str(VLLM_BENCH), "bench", "serve", "--backend", "openai",
                    "--base-url", engine.url, "--endpoint", "/v1/completions", "--model", "target",
                    "--tokenizer", str(FIXTURES / family / "target"), "--dataset-name", "custom",
                    "--dataset-path", str(prompts), "--custom-output-len", str(OUTPUT_TOKENS),
                    "--skip-chat-template", "--disable-shuffle", "--num-prompts", str(count),
                    "--max-concurrency", str(concurrency), "--temperature", "0", "--ignore-eos",
                    "--save-result", "--save-detailed", "--result-dir", str(OUT), "--result-filename", result.name],
                   check=True, capture_output=True, text=True, cwd=REPO)
    r = json.loads(result.read_text())
    if r["failed"]:  # a request without output is neither timed nor compared
        error = next(e for e in r["errors"] if e).strip().splitlines()[-1]
        raise RuntimeError(f"{engine.name}: {r['failed']} of {count} requests failed in "
                           f"`vllm bench serve` ({error}); see {result}")
    return r


def acceptance(driver: Driver, engine: EngineProcess, before: tuple) -> tuple[float, list[float], float]:
    """Acceptance length since ``before``, the acceptance rate per draft position and the
    drafted tokens per verification (0 where not counted)."""
    if isinstance(driver, SglangDriver):  # SGLang reports the running mean only
        from tests.conformance.drivers.base import http_json
        return float(http_json(engine.url + "/server_info")["internal_states"][0]
                     .get("avg_spec_accept_length") or 0.0), [], 0.0
    counters_before, positions_before = before
    counters = driver.counters(engine) - counters_before
    positions = driver.accepted_per_position(engine)
    rates = ([round((now - then) / counters.drafts, 3)
              for now, then in zip(positions, positions_before)]
             if positions and counters.drafts else [])
    drafted = counters.draft_tokens / counters.drafts if counters.drafts else 0.0
    return counters.acceptance_length, rates, drafted


def measure(driver: Driver, method: Method, prompts: Path, count: int, family: str,
            windows: list[int]) -> list[Measurement]:
    rows = []
    with driver.start("bench", family, method) as engine:
        vllm_bench(engine, prompts, 1, 1, family, "-warm-up")
        for concurrency in (1, 4):
            before = ((driver.counters(engine), driver.accepted_per_position(engine))
                      if driver.server_wide_counters else None)
            r = vllm_bench(engine, prompts, count, concurrency, family)
            tps = (1000 / r["mean_tpot_ms"] if concurrency == 1 and r["mean_tpot_ms"]
                   else r["output_throughput"])
            al, per_position, drafted = (acceptance(driver, engine, before) if method.drafter
                                         else (1.0, [], 0.0))
            if concurrency == 1:
                first_tpot = tpot_ms(r, PROFILED_PROMPTS)
            rows.append(Measurement(
                driver.engine, method.name, method.ours, concurrency, round(al, 3),
                method.max_draft if method.drafter else 0, method.cost_aware, round(tps, 1),
                round(r["mean_ttft_ms"], 1), round(r["mean_tpot_ms"], 2),
                round(peak_memory_mb(engine), 1), per_position, round(drafted, 2),
                generated_texts=r["generated_texts"] if concurrency == 1 else []))
        step_parts(driver.engine, engine, method, rows[0], prompts, family, windows, first_tpot)
    return rows


def tpot_ms(result: dict, first: int) -> float:
    """Mean time per output token (ms) of a `vllm bench serve` result's first requests."""
    return statistics.mean((latency - ttft) * 1000 / (n - 1) for latency, ttft, n in zip(
        result["latencies"][:first], result["ttfts"][:first], result["output_lens"][:first]) if n > 1)


def step_parts(engine_name: str, engine: EngineProcess, method: Method, row: Measurement,
               prompts: Path, family: str, windows: list[int], unprofiled_tpot: float) -> None:
    """The engine's own timings of one step's parts, into the concurrency-1 row
    (``unprofiled_tpot``: the same first prompts' time per token without the profiler)."""
    if engine_name == "llamacpp":
        if method.drafter:
            row.t_draft_ms = round(llamacpp_draft_ms(engine), 4)
        else:
            ids = [list(r.prompt_ids) for r in prompt_set("in_domain24")[:4]]
            row.verify_ms_by_window = {n: round(llamacpp_steps.verify_ms(engine, ids, n), 4) for n in windows}
        return
    if not method.drafter:
        return

    def profiled_tpot() -> float:
        return vllm_bench(engine, prompts, PROFILED_PROMPTS, 1, family, "-profiled")["mean_tpot_ms"]
    draft, verify, tpot = profiled_split(engine_name, engine, profiled_tpot)
    scale = unprofiled_tpot / tpot  # the profiler's own cost taken out (same prompts, same AL)
    row.t_draft_ms, row.t_verify_ms = round(draft * scale, 4), round(verify * scale, 4)


def add_bounds(rows: list[Measurement]) -> None:
    """AL x T_step / (T_draft + T_verify) for the concurrency-1 speculative rows."""
    for row in rows:
        # a cost-aware row's verify window changes from step to step: no one bound
        if not row.max_draft or row.concurrency != 1 or row.cost_aware:
            continue
        base = next(b for b in rows if b.engine == row.engine and b.method == BASELINE.name
                    and b.concurrency == 1)
        row.t_step_ms = base.mean_tpot_ms
        if base.verify_ms_by_window:  # llama.cpp: measured on the server without speculation
            row.t_verify_ms = base.verify_ms_by_window[row.max_draft + 1]
        if row.t_draft_ms + row.t_verify_ms > 0:
            row.bound = round(row.acceptance_length * row.t_step_ms
                              / (row.t_draft_ms + row.t_verify_ms), 3)
            row.efficiency = round(row.speedup / row.bound, 3)


def judge_outputs(rows: list[Measurement], prompts: list[str], family: str) -> int:
    """The verdict on every concurrency-1 output that differs from no speculation's; returns
    the number of bugs."""
    bugs = 0
    reference = reference_for(FIXTURES / family / "target")
    for row in rows:
        base = next(b for b in rows if b.engine == row.engine and b.method == BASELINE.name
                    and b.concurrency == row.concurrency)
        if row is base or not row.generated_texts:
            continue
        for i, (prompt, a, b) in enumerate(zip(prompts, base.generated_texts, row.generated_texts)):
            if a != b:
                verdict = reference.judge(text_ids(prompt), text_ids(a), text_ids(b))
                row.verdicts.append(f"prompt {i}: {verdict}")
                bugs += verdict.is_bug
    return bugs


def add_ratios(rows: list[Measurement]) -> None:
    for row in rows:
        base = next(b for b in rows if b.engine == row.engine and b.method == BASELINE.name
                    and b.concurrency == row.concurrency)
        row.speedup = round(row.decode_tokens_per_second / base.decode_tokens_per_second, 3)
        row.ttft_ratio = round(row.mean_ttft_ms / base.mean_ttft_ms, 3) if base.mean_ttft_ms else 0
        row.memory_ratio = round(row.peak_memory_mb / base.peak_memory_mb, 3)


def markdown(rows: list[Measurement], header: str) -> str:
    lines = [header, "",
             "| engine | method | conc. | AL (<= drafted+1) | drafted / step | decode tok/s | speedup | "
             "step cost / target step | TTFT ms (ratio) | peak MB (ratio) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        drafted = f" (<= {r.max_draft + 1})" if r.max_draft else ""
        # speedup = AL x t_target_step / (t_draft + t_verify): the measured AL and speedup
        # give the cost of one draft-and-verify step in target decode steps (1.0 = free drafting)
        cost = f"{r.acceptance_length / r.speedup:.2f}" if r.max_draft and r.speedup else ""
        lines.append(f"| {r.engine} | {r.method}{' (ours)' if r.ours else ''} | {r.concurrency} | "
                     f"{r.acceptance_length}{drafted} | {r.drafted_per_step or ''} | "
                     f"{r.decode_tokens_per_second} | "
                     f"{r.speedup}x | {cost} | {r.mean_ttft_ms} ({r.ttft_ratio}) | "
                     f"{r.peak_memory_mb:.0f} ({r.memory_ratio}) |")
    return "\n".join(lines + bound_table(rows) + position_table(rows) + output_verdicts(rows)) + "\n"


def bound_table(rows: list[Measurement]) -> list[str]:
    """Concurrency 1: a step's parts (ms), the bound they allow and the speedup against it."""
    bounded = [r for r in rows if r.bound]
    if not bounded:
        return []
    lines = ["", "One step at concurrency 1 (ms; T_step without speculation, T_draft and T_verify "
             "from the engine's own timers, ci/step_times.py): bound = AL x T_step / (T_draft + "
             "T_verify), efficiency = speedup / bound.", "",
             "| engine | method | AL | T_step | T_draft | T_verify (window) | T_verify / T_step | "
             "T_draft / T_verify | bound | speedup | efficiency |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in bounded:
        lines.append(f"| {r.engine} | {r.method}{' (ours)' if r.ours else ''} | {r.acceptance_length} | "
                     f"{r.t_step_ms} | {r.t_draft_ms} | {r.t_verify_ms} ({r.max_draft + 1}) | "
                     f"{r.t_verify_ms / r.t_step_ms:.2f} | {r.t_draft_ms / r.t_verify_ms:.2f} | "
                     f"{r.bound}x | {r.speedup}x | {r.efficiency} |")
    return lines


def output_verdicts(rows: list[Measurement]) -> list[str]:
    judged = [r for r in rows if r.generated_texts and r.max_draft]
    lines = ["", "Outputs at concurrency 1 against no speculation (differences judged by the "
             "float32 reference):", ""]
    for r in judged:
        same = len(r.generated_texts) - len(r.verdicts)
        lines.append(f"- {r.engine} / {r.method}: {same}/{len(r.generated_texts)} identical"
                     + "".join(f"; {v}" for v in r.verdicts))
    return lines if judged else []


def position_table(rows: list[Measurement]) -> list[str]:
    """Acceptance rate per draft position, for the rows of speculative methods."""
    spec = [r for r in rows if r.max_draft]
    if not spec:
        return []
    width = max(r.max_draft for r in spec)
    lines = ["", "Acceptance rate at each draft position (accepted / drafts; the reference "
             "loop's own are in fixtures/REPORT.md):", "",
             "| engine | method | conc. | " + " | ".join(str(i + 1) for i in range(width)) + " |",
             "|---|---|---|" + "---|" * width]
    for r in spec:
        rates = " | ".join(map(str, r.acceptance_per_position)) or "engine reports totals only"
        lines.append(f"| {r.engine} | {r.method} | {r.concurrency} | {rates} |")
    return lines


def chart(rows: list[Measurement], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = [r for r in rows if r.max_draft and r.concurrency == 1]
    labels = [f"{r.engine}\n" + r.method.replace("draft-dflash-", "").replace("draft-", "")
              .replace("+cost-aware", "\ncost-aware") for r in spec]
    fig, axes = plt.subplots(1, 2, figsize=(max(6, 1.4 * len(spec)), 3.6))
    for ax, values, title in ((axes[0], [r.acceptance_length for r in spec], "acceptance length"),
                              (axes[1], [r.speedup for r in spec], "decode speedup (conc. 1)")):
        ax.bar(range(len(spec)), values, color=["tab:orange" if r.ours else "tab:blue" for r in spec])
        ax.set_xticks(range(len(spec)), labels, fontsize=7)
        ax.set_title(title)
        ax.axhline(1.0, color="grey", linewidth=0.8)
    bounded = [(i, r.bound) for i, r in enumerate(spec) if r.bound]
    if bounded:
        axes[1].scatter(*zip(*bounded), marker="_", s=400, color="black", zorder=3,
                        label="bound AL x T_step / (T_draft + T_verify)")
        top = max(max(b for _, b in bounded), max(r.speedup for r in spec))
        axes[1].set_ylim(0, 1.25 * top)  # room for the legend above every bar and bound
        axes[1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="vllm,sglang,llamacpp")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--family", default="qwen3_bench",
                        help="fixture family (fixtures/REPORT.md); qwen3_bench is the benchmark's")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    prompts = OUT / "prompts.jsonl"
    write_prompts(prompts, args.prompts)
    rows: list[Measurement] = []
    for name in args.engines.split(","):
        driver = DRIVERS[name]()
        windows = sorted({m.max_draft + 1 for m in driver.methods})
        for method in (BASELINE, *driver.methods, *driver.cost_aware_methods):
            print(f"== {name} / {method.name}", flush=True)
            rows += measure(driver, method, prompts, args.prompts, args.family, windows)
    add_ratios(rows)
    add_bounds(rows)
    bugs = judge_outputs(rows, prompt_texts(args.prompts), args.family)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    header = (f"# Benchmark ({time.strftime('%Y-%m-%d')}, {cpu}, {len(os.sched_getaffinity(0))} cores, "
              f"no GPU; {args.family} fixtures, {args.prompts} prompts x {OUTPUT_TOKENS} tokens, greedy)")
    (OUT / "bench.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    (OUT / "bench.md").write_text(markdown(rows, header))
    chart(rows, OUT / "bench.png")
    print(markdown(rows, header))
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
