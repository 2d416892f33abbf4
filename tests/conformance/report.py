"""The conformance report: a JSON file and a markdown table per engine, in reports/."""

from __future__ import annotations

import json
from pathlib import Path

from .compare import CaseResult

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "conformance"


def write(engine: str, results: list[CaseResult], notes: dict[str, str]) -> Path:
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{engine}.json").write_text(json.dumps(
        {"engine": engine, "notes": notes, "cases": [r.as_dict() for r in results]}, indent=2) + "\n")
    methods = sorted({r.method for r in results})
    lines = [f"# Conformance: {engine}", "",
             "Each cell: status, outputs equal / prompts, acceptance length, first divergence "
             "(prompt:token, gap), seconds with speculation / without.", "",
             "| scenario | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    by_key = {(r.scenario, r.method): r for r in results}
    for scenario in dict.fromkeys(r.scenario for r in results):
        cells = []
        for method in methods:
            r = by_key.get((scenario, method))
            if r is None:
                cells.append("")
            elif r.status == "not available":
                cells.append(f"n/a: {r.reason}")
            else:
                div = r.divergences[0] if r.divergences else None
                first = (f" div {div.prompt}:{div.position} gap {div.gap if div.gap is None else round(div.gap, 4)}"
                         if div else "")
                why = f" ({r.reason})" if r.reason else ""
                cells.append(f"{r.status}{why} {r.equal} AL {r.acceptance_length}{first} "
                             f"{r.seconds}/{r.baseline_seconds}s")
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    near = [r for r in results if r.status == "near-tie"]
    if near:
        lines += ["", "Divergences accepted (judged against the float32 reference, "
                  "blockdraft/verdict.py):"]
        lines += [f"- {r.scenario} / {r.method}: " + "; ".join(d.describe() for d in r.divergences)
                  for r in near]
    if notes:
        lines += ["", "Notes:"] + [f"- {k}: {v}" for k, v in notes.items()]
    path = REPORTS / f"{engine}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
