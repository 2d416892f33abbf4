"""Where a llama.cpp speculative step's time goes, from llama-server's own timers.

One server per method, with the conformance suite's arguments but one slot and trace verbosity
(so that common_speculative prints its statistics after every request), the same greedy prompts:
- T_step: decode time per token without speculation (`timings.predicted_ms / predicted_n`);
- T_verify: one target forward over drafted + 1 tokens: the prompt time of that many new tokens
  after a cached prefix, on the server without speculation (`timings.prompt_ms`);
- T_draft: common_speculative's draft time per call (`dur(b,g,a)`): the drafter's graph, with the
  LiLiCorr head or DSpark's Markov head inside it, and the walk on the host;
- AL from the same statistics; a step = decode time per token x AL; the rest of a step (the
  verification forward and the server's bookkeeping) = step - T_draft;
- bound = AL x T_step / (T_draft + T_verify); the measured speedup T_step / (step / AL); efficiency
  = speedup / bound.
Methods run round-robin `--repeat` times; each figure is the median. Writes
reports/bench/llamacpp-steps.{json,md}.

    .venvs/core/bin/python ci/llamacpp_steps.py [--family qwen3] [--prompts 8] [--repeat 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conformance.drivers.base import BASELINE, EngineProcess, http_json  # noqa: E402
from tests.conformance.drivers.llamacpp import LLAMA_SERVER, LlamaCppDriver, gguf  # noqa: E402
from tests.conformance.prompts import prompt_set  # noqa: E402

sys.path.insert(0, str(LLAMA_SERVER.parents[2] / "gguf-py"))  # the pinned tree's reader
from gguf import GGUFReader  # noqa: E402

OUT = REPO / "reports" / "bench"
OUTPUT_TOKENS = 128
STATS = re.compile(r"#calls\(b,g,a\) = +(\d+) +(\d+) +(\d+).*?#mean acc len = ([\d.]+).*?"
                   r"dur\(b,g,a\) = ([\d.]+), ([\d.]+), ([\d.]+) ms")


def server(family: str, method) -> EngineProcess:
    """The conformance suite's server, with one slot (one set of speculative statistics) and the
    trace verbosity at which common_speculative prints them."""
    conformance = LlamaCppDriver().start("default", family, method)
    argv = list(conformance.argv)
    argv[argv.index("-np") + 1] = "1"
    # a name of its own: the conformance server's log (reports/conformance/logs/) stays its own
    return EngineProcess(f"llamacpp-steps-{family}-{method.name}", [*argv, "-lv", "4"], conformance.port,
                         conformance.health_path, method)


def complete(engine: EngineProcess, prompt: list[int], n_predict: int, cache: bool) -> dict:
    return http_json(engine.url + "/completion", {
        "prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
        "ignore_eos": True, "cache_prompt": cache})["timings"]


def verify_ms(engine: EngineProcess, prompts: list[list[int]], window: int) -> float:
    """One target forward over ``window`` new tokens after a cached prefix (median over the
    prompts), on a llama-server without speculation."""
    times = []
    for prompt in prompts:
        complete(engine, prompt, 1, cache=True)
        t = complete(engine, prompt + prompt[:window], 1, cache=True)
        if t["prompt_n"] == window:
            times.append(t["prompt_ms"])
    if not times:
        raise RuntimeError(f"llama-server never evaluated exactly {window} new prompt tokens")
    return statistics.median(times)


def measure(family: str, method, prompts: list[list[int]], windows: list[int]) -> dict:
    with server(family, method) as engine:
        timings = [complete(engine, p, OUTPUT_TOKENS, cache=False) for p in prompts]
        row = {"method": method.name,
               "ms_per_token": sum(t["predicted_ms"] for t in timings) / sum(t["predicted_n"] for t in timings)}
        if method.drafter is None:
            for n in windows:
                row[f"T_verify_{n}_ms"] = verify_ms(engine, prompts, n)
            return row
    stats = statistics_of(engine.log_path.read_text(errors="replace"))
    if stats is None:
        raise RuntimeError(f"{method.name}: no speculative statistics in {engine.log_path}")
    if stats["accepts"] == 0:
        raise RuntimeError(f"{method.name}: nothing was verified")
    row.update(AL=stats["AL"], T_draft_ms=stats["draft_ms"] / stats["drafts"], steps=stats["accepts"],
               tokens=sum(t["predicted_n"] for t in timings))
    return row


def statistics_of(log: str) -> dict | None:
    """The last statistics line common_speculative printed (cumulative over the server's requests):
    its draft and accept call counts, mean acceptance length and draft time (the g of dur(b,g,a))."""
    found = STATS.findall(log)
    if not found:
        return None
    _, drafts, accepts, al, _, draft_ms, _ = found[-1]
    return {"drafts": int(drafts), "accepts": int(accepts), "AL": float(al), "draft_ms": float(draft_ms)}


# rows each LiLiCorr weight multiplies per block: every lattice node, every slot, or the anchor
HEAD_ROWS = {"token_proj": "nodes", "feat_up": "nodes", "feat_down": "nodes", "attn_qkv": "nodes",
             "attn_output": "nodes", "ffn_up": "nodes", "ffn_down": "nodes", "factor_in": "nodes",
             "out_head": "nodes", "in_head": "nodes", "pass_proj": "slots", "ctx_proj": "anchor",
             "anchor_out": "anchor"}


def matmul_flops(family: str) -> dict:
    """FLOPs of one block's LiLiCorr head (its matrix products, from the GGUF's shapes), and of
    one target token (every weight matrix but the embedding)."""
    head = GGUFReader(gguf(family, "lilicorr"))
    meta = {f.name: f.parts[-1][0] for f in head.fields.values() if f.name.startswith("dflash.")}
    slots = int(meta["dflash.block_size"]) - 1
    nodes = slots * int(meta["dflash.lilicorr.candidate_top_k"])
    width = int(meta["dflash.lilicorr.embedding_length"])
    rows = {"nodes": nodes, "slots": slots, "anchor": 1}
    macs = 2 * nodes * nodes * width * int(meta["dflash.lilicorr.block_count"])  # lattice attention
    for t in head.tensors:
        name = t.name.removeprefix("lilicorr.").removesuffix(".weight")
        if t.name.startswith("lilicorr.") and t.name.endswith(".weight") and name in HEAD_ROWS:
            macs += rows[HEAD_ROWS[name]] * int(t.n_elements)  # stacked layers count once each
        elif t.name == "fc.weight":  # the anchor's projection, as in the KV injection
            macs += int(t.n_elements)
    target = GGUFReader(gguf(family, "target"))
    target_macs = sum(int(t.n_elements) for t in target.tensors
                      if len(t.shape) >= 2 and t.name != "token_embd.weight")
    return {"head_mflop_per_block": round(2 * macs / 1e6, 2),
            "target_mflop_per_token": round(2 * target_macs / 1e6, 2)}


def summarise(runs: list[dict], methods) -> list[dict]:
    median = lambda name, key: statistics.median(r[key] for r in runs if r["method"] == name)  # noqa: E731
    t_step = median(BASELINE.name, "ms_per_token")
    rows = [{"method": BASELINE.name, "T_step_ms": round(t_step, 4)}]
    for method in methods:
        al, t_draft = median(method.name, "AL"), median(method.name, "T_draft_ms")
        t_verify = median(BASELINE.name, f"T_verify_{method.max_draft + 1}_ms")
        step = median(method.name, "ms_per_token") * al
        speedup = t_step * al / step
        bound = al * t_step / (t_draft + t_verify)
        rows.append({"method": method.name, "ours": method.ours, "AL": al,
                     "T_step_ms": round(t_step, 4), "verify_window": method.max_draft + 1,
                     "T_verify_ms": round(t_verify, 4), "T_verify_over_T_step": round(t_verify / t_step, 2),
                     "T_draft_ms": round(t_draft, 4), "step_ms": round(step, 4),
                     "rest_of_step_ms": round(step - t_draft, 4), "bound": round(bound, 3),
                     "speedup": round(speedup, 3), "efficiency": round(speedup / bound, 3)})
    return rows


def markdown(rows: list[dict], flops: dict, family: str, n_prompts: int, repeat: int) -> str:
    lines = [f"# llama.cpp: where a speculative step's time goes ({family} fixtures)", "",
             f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {platform.node()}; {n_prompts} prompts x "
             f"{OUTPUT_TOKENS} tokens, greedy, llama-server -t 2 -np 1; medians of {repeat} round-robin "
             "runs (ci/llamacpp_steps.py). Times in ms per step (one draft and one verification).", "",
             "| method | AL | T_step | T_verify (window) | T_verify / T_step | T_draft | step | rest of step | "
             "bound | speedup | efficiency |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows[1:]:
        name = r["method"] + (" (ours)" if r["ours"] else "")
        lines.append(f"| {name} | {r['AL']} | {r['T_step_ms']} | {r['T_verify_ms']} ({r['verify_window']}) | "
                     f"{r['T_verify_over_T_step']} | {r['T_draft_ms']} | {r['step_ms']} | {r['rest_of_step_ms']} | "
                     f"{r['bound']}x | {r['speedup']}x | {r['efficiency']} |")
    by_name = {r["method"]: r for r in rows}
    if {"draft-dflash", "draft-dflash-lilicorr"} <= by_name.keys():
        # the LiLiCorr drafter is the DFlash drafter's backbone plus its head, in one graph
        dflash = by_name["draft-dflash"]
        head = by_name["draft-dflash-lilicorr"]["T_draft_ms"] - dflash["T_draft_ms"]
        verify, window = dflash["T_verify_ms"], dflash["verify_window"]
        verify_mflop = flops["target_mflop_per_token"] * window
        lines += ["", f"LiLiCorr head (LiLiCorr's T_draft - DFlash's): {head:.4f} ms per step, "
                  f"{head / dflash['step_ms']:.1%} of a DFlash step, for "
                  f"{flops['head_mflop_per_block']} MFLOP of matrix products "
                  f"({flops['head_mflop_per_block'] / head:.0f} GFLOP/s); the target's verify window "
                  f"of {window} tokens: {verify_mflop:.2f} MFLOP in {verify:.4f} ms "
                  f"({verify_mflop / verify:.0f} GFLOP/s)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen3")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    methods = [m for m in LlamaCppDriver.methods if gguf(args.family, m.drafter).exists()]
    prompts = [list(r.prompt_ids) for r in prompt_set("in_domain24")[:args.prompts]]
    windows = sorted({m.max_draft + 1 for m in methods})
    runs = [measure(args.family, method, prompts, windows)
            for _ in range(args.repeat) for method in (BASELINE, *methods)]
    rows = summarise(runs, methods)
    flops = matmul_flops(args.family)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llamacpp-steps.json").write_text(json.dumps({"runs": runs, "rows": rows, "flops": flops}, indent=1) + "\n")
    text = markdown(rows, flops, args.family, args.prompts, args.repeat)
    (args.out / "llamacpp-steps.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
