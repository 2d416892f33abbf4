"""Renders the reliability table from the rows the test suites recorded
(reports/reliability/rows.jsonl, see tests/reliability.py) into reports/reliability/reliability.md.

    python ci/reliability.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "reports" / "reliability" / "rows.jsonl"
ENGINES = ("vllm", "sglang", "llamacpp")


def render(rows: list[dict]) -> str:
    lines = [f"# Reliability ({time.strftime('%Y-%m-%d')})", "",
             "Written by README's test command from what each test saw: one row per bad input, "
             "load or fault, with the engine's answer and the test's verdict.", "",
             "Aborts during the verify forward: an engine streams a chunk as a step ends, so "
             "each client that leaves waits for a chunk, then leaves where the next step runs "
             "its target forward over the drafts (a third of a step later in vLLM, which "
             "verifies first and drafts after; two thirds in llama-server and SGLang, which "
             "draft first) unless another chunk came first; the step is the median gap between "
             "its own chunks (tests/conformance/client.py, abandon_streams).", "",
             "| engine | input or fault | what happens | test |", "|---|---|---|---|"]
    order = {engine: i for i, engine in enumerate(ENGINES)}
    for row in sorted(rows, key=lambda r: order.get(r["engine"], len(order))):
        outcome = row["outcome"].replace(f"{REPO}/", "").replace("|", "\\|")
        lines.append(f"| {row['engine']} | {row['case']} | {outcome} | {row['verdict']} |")
    verdicts = [r["verdict"] for r in rows]
    lines += ["", f"{len(rows)} rows: {verdicts.count('passed')} passed, "
              f"{len(rows) - verdicts.count('passed')} not passed."]
    return "\n".join(lines) + "\n"


def main() -> int:
    if not ROWS.is_file():
        print(f"no rows in {ROWS}: run the tests first", file=sys.stderr)
        return 1
    rows = [json.loads(line) for line in ROWS.read_text().splitlines() if line.strip()]
    out = ROWS.with_name("reliability.md")
    out.write_text(render(rows))
    print(f"reliability table: {out} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
