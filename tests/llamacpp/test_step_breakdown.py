"""ci/llamacpp_steps.py reads a step's parts from llama-server's own timers.

One prompt, one round: every method's statistics are found, acceptance is real, and the parts
add up (a step is a draft plus a verification, so it is longer than either; the bound and the
speedup are the ratios the script's docstring defines).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_every_method_reports_its_step_parts(tmp_path):
    subprocess.run([sys.executable, str(REPO / "ci" / "llamacpp_steps.py"), "--prompts", "1",
                    "--repeat", "1", "--out", str(tmp_path)], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)
    rows = json.loads((tmp_path / "llamacpp-steps.json").read_text())["rows"]
    baseline, *speculative = rows
    assert [r["method"] for r in speculative] == ["draft-dflash", "draft-dflash-lilicorr", "draft-dspark"]
    for r in speculative:
        assert r["AL"] > 1.5, r
        assert r["T_verify_ms"] > baseline["T_step_ms"], r   # a window costs more than one token
        assert r["step_ms"] > max(r["T_draft_ms"], r["T_step_ms"]), r
        assert r["bound"] == pytest.approx(r["AL"] * r["T_step_ms"] / (r["T_draft_ms"] + r["T_verify_ms"]), rel=0.01)
        assert r["speedup"] == pytest.approx(r["AL"] * r["T_step_ms"] / r["step_ms"], rel=0.01)
    assert "LiLiCorr head" in (tmp_path / "llamacpp-steps.md").read_text()
