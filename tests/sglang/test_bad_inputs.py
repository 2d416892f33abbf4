"""Each bad DSPARK input stops launch_server before it serves, with one line naming cause and fix.

The drafters are copies of the fixture drafter with one thing wrong in config.json (weights
are linked, not copied).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_servers import BASE_ARGS, CPU_ENV, ROOT, fixture_dir

pytestmark = pytest.mark.slow


def _drafter(tmp_path: Path, edit) -> Path:
    source = fixture_dir("qwen3", "dspark")
    out = tmp_path / "drafter"
    out.mkdir()
    for file in source.iterdir():
        if file.name != "config.json":
            (out / file.name).symlink_to(file)
    config = json.loads((source / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


def _launch(draft: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sglang.launch_server", *BASE_ARGS, "--port", "8299",
           "--model-path", str(fixture_dir("qwen3", "target")),
           "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(draft), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, **CPU_ENV})


def _error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0, "launch_server accepted a bad input"
    assert "Uvicorn running" not in result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if "DrafterSpecError: " in ln]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0].split("DrafterSpecError: ", 1)[1]


def _drop_markov(config):
    for section in (config, config["dflash_config"]):
        section.pop("markov_rank", None)
        section.pop("markov_head_type", None)


def _taps_outside(config):
    config["dflash_config"]["target_layer_ids"] = [1, 7]


def _other_vocab(config):
    config["vocab_size"] = 4096


def _other_hidden(config):
    config["hidden_size"] = 512


def _dflash_checkpoint(config):
    config["architectures"] = ["DFlashDraftModel"]


CASES = {
    "no Markov head": (_drop_markov, "has no top-level markov_rank"),
    "taps outside the target": (_taps_outside, "target_layer_ids [7] are outside the target's"),
    "vocabulary mismatch": (_other_vocab, "drafter vocabulary 4096 != target vocabulary"),
    "hidden size mismatch": (_other_hidden, "drafter hidden size 512 != target hidden size"),
    "DFlash checkpoint": (_dflash_checkpoint, "needs a dspark drafter, but architectures="),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_drafter_is_refused(case, tmp_path):
    edit, expected = CASES[case]
    message = _error_line(_launch(_drafter(tmp_path, edit)))
    assert expected in message


def test_block_size_above_trained_is_refused():
    draft = fixture_dir("qwen3", "dspark")
    trained = json.loads((draft / "config.json").read_text())["dflash_config"]["block_size"]
    message = _error_line(_launch(draft, "--speculative-dspark-block-size", str(trained + 1)))
    assert message.startswith(f"--speculative-dspark-block-size {trained + 1}: ")
    assert f"ask for at most {trained}" in message
