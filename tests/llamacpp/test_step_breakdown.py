"""ci/llamacpp_steps.py reads a step's parts from llama-server's own timers.

The parser picks the right columns of common_speculative's statistics line; on a real server, one
prompt, one round: every method's statistics are found, acceptance is real, the counts agree with
the tokens the server returned, and the rows are the ratios the script's docstring defines. Times
from different servers are not compared: the suite shares the cores with the others.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "llamacpp_steps.py"


def load_script():
    spec = importlib.util.spec_from_file_location("llamacpp_steps", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_statistics_line_is_read_by_column():
    # the format of common_speculative_print_stats (common/speculative.cpp), b, g and a all different
    line = ("srv  log_server_r: statistics     draft-dflash: #calls(b,g,a) =    2    120    118, "
            "#gen drafts =    120, #acc drafts =   100, #gen tokens =    840, #acc tokens =   230, "
            "#mean acc len = 2.95, #acc rate/pos = (0.900, 0.500), dur(b,g,a) = 0.100, 84.000, 0.500 ms\n")
    stats = load_script().statistics_of("earlier output\n" + line.replace("118", "50") + line)
    assert stats == {"drafts": 120, "accepts": 118, "AL": 2.95, "draft_ms": 84.0}


@pytest.mark.slow
def test_every_method_reports_its_step_parts(tmp_path):
    subprocess.run([sys.executable, str(SCRIPT), "--prompts", "1", "--repeat", "1", "--out", str(tmp_path)],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    report = json.loads((tmp_path / "llamacpp-steps.json").read_text())
    baseline, *speculative = report["rows"]
    assert [r["method"] for r in speculative] == ["draft-dflash", "draft-dflash-lilicorr", "draft-dspark"]
    runs = {r["method"]: r for r in report["runs"]}
    for r in speculative:
        assert r["AL"] > 1.5, r
        # each verification returns AL tokens on average, the request's first token is the prefill's
        # (within the last step's truncation and AL's rounding to 2 decimals)
        run = runs[r["method"]]
        assert abs(run["tokens"] - 1 - run["steps"] * run["AL"]) <= 2 + 0.005 * run["steps"], run
        # within one server's run: a step contains its draft
        assert r["step_ms"] > r["T_draft_ms"] > 0, r
        assert r["T_verify_ms"] > 0 and baseline["T_step_ms"] > 0, r
        # the report rounds ratios to 3 decimals (abs), its inputs to 2 and 4 (rel)
        assert r["bound"] == pytest.approx(r["AL"] * r["T_step_ms"] / (r["T_draft_ms"] + r["T_verify_ms"]),
                                           rel=0.01, abs=0.0006)
        assert r["speedup"] == pytest.approx(r["AL"] * r["T_step_ms"] / r["step_ms"], rel=0.01, abs=0.0006)
    assert "LiLiCorr head" in (tmp_path / "llamacpp-steps.md").read_text()
