"""The reliability table (issue: bad input, load, faults): tests record what an engine did with
a bad file, a burst or a fault; each session appends its rows, with the test's verdict, to
reports/reliability/rows.jsonl, and ci/reliability.py renders them as one table.

A test takes the ``reliability`` fixture and calls it once per input or fault it exercised:
``reliability("vllm", "truncated weights", message)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROWS_FILE = Path(__file__).resolve().parents[1] / "reports" / "reliability" / "rows.jsonl"

_rows: list[dict] = []
_verdicts: dict[str, str] = {}


@pytest.fixture
def reliability(request):
    def record(engine: str, case: str, outcome: str) -> None:
        _rows.append({"engine": engine, "case": case, "outcome": " ".join(outcome.split()),
                      "test": request.node.nodeid})
    return record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or report.outcome != "passed":
        # a failed set-up or teardown decides the verdict as much as the call
        if _verdicts.get(item.nodeid) in (None, "passed"):
            _verdicts[item.nodeid] = report.outcome


def pytest_sessionfinish(session, exitstatus):
    if not _rows:
        return
    ROWS_FILE.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({**row, "verdict": _verdicts.get(row["test"], "not run")}) + "\n"
                    for row in _rows)
    # one unbuffered append: ci/test.sh runs several sessions at once, and a single O_APPEND
    # write does not interleave with theirs
    with ROWS_FILE.open("ab", buffering=0) as f:
        f.write(lines.encode())
