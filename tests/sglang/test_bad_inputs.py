"""Each bad DSPARK input is refused before any model loads, with one line naming cause and fix.

The drafters are copies of the fixture drafter with one thing wrong in config.json (weights
are linked, not copied). Every case goes through SGLang's own argument resolution; one goes
through a real ``launch_server``, to check what the user sees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_servers import fixture_dir, launch, resolve

pytestmark = pytest.mark.slow


def _drafter(folder: Path, edit) -> Path:
    source = fixture_dir("qwen3", "dspark")
    folder.mkdir()
    for file in source.iterdir():
        if file.name != "config.json":
            (folder / file.name).symlink_to(file)
    config = json.loads((source / "config.json").read_text())
    edit(config, folder)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def config_edit(change):
    """An edit of config.json alone."""
    return lambda config, folder: change(config)


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


def _lilicorr_checkpoint(config):
    config["architectures"] = ["LiLiCorrDraftModel"]


def _truncated_weights(config, folder):
    """As an interrupted copy leaves it: the weights file cut short."""
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.unlink()  # a link to the fixture
    weights.write_bytes(data[:-4096])


CASES = {
    "no Markov head": (config_edit(_drop_markov), "has no top-level markov_rank"),
    "taps outside the target": (config_edit(_taps_outside),
                                "target_layer_ids [7] are outside the target's"),
    "vocabulary mismatch": (config_edit(_other_vocab),
                            "drafter vocabulary 4096 != target vocabulary"),
    "hidden size mismatch": (config_edit(_other_hidden),
                             "drafter hidden size 512 != target hidden size"),
    "DFlash checkpoint": (config_edit(_dflash_checkpoint),
                          "needs a dspark drafter, but architectures='DFlashDraftModel' is a dflash "
                          "checkpoint; use --speculative-algorithm DFLASH for it"),
    "LiLiCorr checkpoint": (config_edit(_lilicorr_checkpoint),
                            "needs a dspark drafter, but architectures='LiLiCorrDraftModel' is a "
                            "lilicorr checkpoint"),
    "truncated weights": (_truncated_weights, "the file is truncated or corrupted, copy it again"),
}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("drafters")
    target = str(fixture_dir("qwen3", "target"))
    drafters = {name: _drafter(root / f"case{i}", edit) for i, (name, (edit, _)) in enumerate(CASES.items())}
    results, _ = resolve([["--model-path", target, "--speculative-draft-model-path", str(path)]
                          for path in drafters.values()])
    return dict(zip(drafters, results))


@pytest.mark.parametrize("case", CASES)
def test_bad_drafter_is_refused_with_one_line(case, refusals, reliability):
    result = refusals[case]
    reliability("sglang", case, f"refused before loading: {result.get('error_type')}: "
                                f"{result.get('error')}")
    assert result.get("error_type") == "DrafterSpecError", result
    assert CASES[case][1] in result["error"]
    assert "\n" not in result["error"]


def test_launch_server_stops_before_loading_with_one_line(tmp_path, reliability):
    draft = fixture_dir("qwen3", "dspark")
    trained = json.loads((draft / "config.json").read_text())["dflash_config"]["block_size"]
    result = launch("--model-path", str(fixture_dir("qwen3", "target")),
                    "--speculative-algorithm", "DSPARK", "--speculative-draft-model-path", str(draft),
                    "--speculative-dspark-block-size", str(trained + 1))
    assert result.returncode != 0, "launch_server accepted a bad input"
    output = result.stdout + result.stderr
    assert "Uvicorn running" not in output and "Load weight begin" not in output
    lines = [ln for ln in result.stderr.splitlines() if "DrafterSpecError: " in ln]
    assert len(lines) == 1, result.stderr[-3000:]
    message = lines[0].split("DrafterSpecError: ", 1)[1]
    reliability("sglang", "`launch_server` with --speculative-dspark-block-size above the trained "
                "block", f"exit {result.returncode} before loading: DrafterSpecError: {message}")
    assert message.startswith(f"--speculative-dspark-block-size {trained + 1}: ")
    assert f"ask for at most {trained}" in message
