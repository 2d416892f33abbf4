"""The reference speculative loop on a quick fixture build of a non-default shape: every
drafter kind reproduces the target's greedy output, accepts tokens, and validates."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from blockdraft.drafter import load_drafter
from blockdraft.fixtures.__main__ import main as fixtures_main
from blockdraft.loop import greedy_generate, speculative_generate
from blockdraft.specs import validate_drafter
from blockdraft.target import HFTarget

pytestmark = pytest.mark.slow
KINDS = {"dflash": "dflash", "lilicorr": "lilicorr", "dspark": "dspark"}


@pytest.fixture(scope="module", params=["qwen3", "lfm2"])
def family(request, tiny_build):
    folder = tiny_build / request.param
    config = json.loads((folder / "dflash" / "config.json").read_text())
    target = HFTarget.from_pretrained(folder / "target", config["dflash_config"]["target_layer_ids"])
    hidden = target.model.config.hidden_size
    drafters = {kind: load_drafter(folder / kind, target_hidden_size=hidden) for kind in KINDS}
    return folder, target, drafters


def prompts(n=3, length=20):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(10, 500, (length + 3 * i,), generator=g).tolist() for i in range(n)]


def test_drafters_validate_against_their_target(family):
    folder, _, _ = family
    for kind, method in KINDS.items():
        spec = validate_drafter(folder / kind, method, folder / "target")
        assert spec.backbone.block_size == (7 if kind == "dspark" else 6)
        assert spec.lilicorr is None or spec.lilicorr.candidate_topk == 2


@pytest.mark.parametrize("kind", KINDS)
def test_speculative_output_is_the_greedy_output(family, kind):
    _, target, drafters = family
    drafter = drafters[kind]
    num_draft = drafter.drafter_spec.max_draft_tokens
    for prompt in prompts():
        reference = greedy_generate(target, prompt, 40)
        out, stats = speculative_generate(target, drafter, prompt, 40, num_draft)
        assert out == reference
        assert len(out) == 40                       # max_tokens ends exactly, inside a block or not
        assert stats.drafts > 0 and stats.drafted_tokens <= stats.drafts * num_draft
        assert 1.0 <= stats.acceptance_length <= num_draft + 1
        per_position = stats.accepted_per_position
        assert all(a >= b for a, b in zip(per_position, per_position[1:]))
        assert sum(per_position) == stats.accepted_tokens


def test_stop_token_inside_a_block(family):
    _, target, drafters = family
    prompt = prompts(1)[0]
    reference = greedy_generate(target, prompt, 40)
    stop = reference[25]                            # a token the target will produce
    expected = reference[:reference.index(stop) + 1]
    for kind, drafter in drafters.items():
        out, _ = speculative_generate(target, drafter, prompt, 40, 5, stop_ids={stop})
        assert out == expected, kind


def test_drafters_accept_tokens(family):
    """Even the quick budget's drafters must accept something, or the loop would not tell a
    working drafter from a broken one."""
    _, target, drafters = family
    for kind, drafter in drafters.items():
        accepted = 0
        for prompt in prompts():
            _, stats = speculative_generate(target, drafter, prompt, 40, 5)
            accepted += stats.accepted_tokens
        assert accepted > 0, kind


def test_manifest_describes_the_store(tiny_build):
    manifest = json.loads((tiny_build.parent / "manifest.json").read_text())
    assert set(manifest["targets"]) == {"qwen3", "lfm2"}
    for name, entry in manifest["files"].items():
        path = tiny_build.parent / name
        assert path.stat().st_size == entry["bytes"]
    assert manifest["plan"]["drafter"]["block_size"] == 6


def test_rebuilding_one_family_keeps_the_others(tiny_build, tiny_shape, tmp_path):
    """`build --targets lfm2 --reuse target` retrains LFM2's drafters only: the manifest keeps
    Qwen3's figures and both target shapes in its plan (what the committed fixtures were made with)."""
    before = json.loads((tiny_build.parent / "manifest.json").read_text())
    root = tmp_path / "fixtures"
    shutil.copytree(tiny_build.parent, root, ignore=shutil.ignore_patterns("materialized"))
    assert fixtures_main(["build", "--root", str(root), "--quick", "--targets", "lfm2",
                          "--reuse", "target", *tiny_shape]) == 0
    after = json.loads((root / "manifest.json").read_text())
    assert after["plan"] == before["plan"]
    assert after["targets"]["qwen3"] == before["targets"]["qwen3"]
    assert after["targets"]["lfm2"]["reused"] == "target"
