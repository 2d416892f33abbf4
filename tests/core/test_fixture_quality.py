"""The committed fixtures, as materialised by ci/setup.sh, meet the quality floor: measured
here with the reference loop on held-out in-domain prompts, not read from the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from blockdraft.fixtures.evaluate import held_out_prompts, measure_family
from blockdraft.fixtures.store import file_digest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "build" / "fixtures"
AL_FLOOR = 3.0         # issue 3's quality floor, every drafter
REGRESSION_FLOOR = 2.4  # what the committed fixtures reach today (fixtures/REPORT.md), minus noise
NUM_DRAFT = 7


def test_store_matches_its_manifest():
    manifest = json.loads((REPO / "fixtures/manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert file_digest(REPO / "fixtures" / name) == entry["sha256"], name
    assert manifest["total_bytes"] < 30e6


@pytest.fixture(scope="module", params=["qwen3", "lfm2"])
def acceptance(request) -> dict[str, float]:
    family = request.param
    folder = FIXTURES / family
    tokenizer = Tokenizer.from_file(str(folder / "target/tokenizer.json"))
    prompts = held_out_prompts(REPO / "fixtures/corpus/stdlib.jsonl.xz", tokenizer, 12)
    stats = measure_family(folder, prompts, new_tokens=96, num_draft=NUM_DRAFT)
    lengths = {kind: round(s.acceptance_length, 3) for kind, s in stats.items()}
    print(f"{family}: acceptance length at {NUM_DRAFT} drafted tokens: {lengths}")
    return lengths


def test_drafters_keep_their_committed_quality(acceptance):
    assert min(acceptance.values()) >= REGRESSION_FLOOR, acceptance


@pytest.mark.xfail(strict=True, reason="issue 3 open: the committed DFlash and LiLiCorr drafters "
                   "reach AL 2.5-2.7, and LiLiCorr's lead over DFlash is within noise "
                   "(fixtures/REPORT.md)")
def test_drafters_reach_the_acceptance_floor(acceptance):
    assert min(acceptance.values()) >= AL_FLOOR, acceptance
    assert acceptance["lilicorr"] > acceptance["dflash"], "the LiLiCorr head must earn its cost"
