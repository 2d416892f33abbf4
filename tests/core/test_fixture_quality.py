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
AL_FLOOR = 3.0
NUM_DRAFT = 7


def test_store_matches_its_manifest():
    manifest = json.loads((REPO / "fixtures/manifest.json").read_text())
    for name, entry in manifest["files"].items():
        assert file_digest(REPO / "fixtures" / name) == entry["sha256"], name
    assert manifest["total_bytes"] < 30e6


@pytest.mark.parametrize("family", ["qwen3", "lfm2"])
def test_drafters_reach_the_acceptance_floor(family):
    folder = FIXTURES / family
    tokenizer = Tokenizer.from_file(str(folder / "target/tokenizer.json"))
    prompts = held_out_prompts(REPO / "fixtures/corpus/stdlib.jsonl.xz", tokenizer, 12)
    stats = measure_family(folder, prompts, new_tokens=96, num_draft=NUM_DRAFT)
    lengths = {kind: round(s.acceptance_length, 3) for kind, s in stats.items()}
    print(f"{family}: acceptance length at {NUM_DRAFT} drafted tokens: {lengths}")
    assert min(lengths.values()) >= AL_FLOOR, lengths
    assert lengths["lilicorr"] > lengths["dflash"], "the LiLiCorr head must earn its cost"
