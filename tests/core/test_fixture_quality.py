"""The committed fixtures, as materialised by ci/setup.sh, meet the quality floor: measured
here with the reference loop on the builder's held-out in-domain prompts, and equal to what
the manifest (and REPORT.md) state."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from blockdraft.fixtures.evaluate import DrafterQuality, measure_family, plan_prompts
from blockdraft.fixtures.shapes import BuildPlan
from blockdraft.fixtures.store import file_digest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "build" / "fixtures"
AL_FLOOR = 3.0  # issue 3's quality floor, every drafter
NUM_DRAFT = 7
MANIFEST = json.loads((REPO / "fixtures/manifest.json").read_text())


def test_store_matches_its_manifest():
    for name, entry in MANIFEST["files"].items():
        assert file_digest(REPO / "fixtures" / name) == entry["sha256"], name
    assert MANIFEST["total_bytes"] < 30e6


def test_fixtures_follow_the_default_plan():
    """The committed fixtures are what `python -m blockdraft.fixtures build` plans today."""
    assert MANIFEST["plan"] == json.loads(json.dumps(asdict(BuildPlan())))


@pytest.fixture(scope="module", params=["qwen3", "lfm2"])
def measured(request) -> tuple[str, dict[str, DrafterQuality]]:
    """(family, quality per drafter) on the prompts REPORT.md was measured on."""
    family = request.param
    folder = FIXTURES / family
    tokenizer = Tokenizer.from_file(str(folder / "target/tokenizer.json"))
    prompts = plan_prompts(MANIFEST["plan"], REPO / "fixtures/corpus/stdlib.jsonl.xz", tokenizer)
    _, quality = measure_family(folder, prompts, MANIFEST["plan"]["budget"]["eval_new_tokens"],
                                {kind: (kind, NUM_DRAFT) for kind in ("dflash", "lilicorr", "dspark")})
    print(f"{family}: at {NUM_DRAFT} drafted tokens " + ", ".join(
        f"{kind} AL {q.acceptance_length:.3f} (95% {q.interval[0]:.3f}-{q.interval[1]:.3f})"
        for kind, q in quality.items()))
    return family, quality


def acceptance_lengths(measured) -> dict[str, float]:
    return {kind: round(q.acceptance_length, 3) for kind, q in measured[1].items()}


def test_report_states_what_the_fixtures_do(measured):
    lengths = acceptance_lengths(measured)
    drafters = MANIFEST["targets"][measured[0]]["drafters"]
    reported = {kind: drafters[kind]["acceptance_length"] for kind in lengths}
    assert reported == pytest.approx(lengths, abs=0.02), (reported, lengths)


def test_speculation_is_lossless(measured):
    for kind, q in measured[1].items():
        assert q.lossless == q.prompts, f"{kind}: {q.lossless}/{q.prompts} outputs equal plain greedy"


def test_drafters_reach_the_acceptance_floor(measured):
    lengths = acceptance_lengths(measured)
    assert min(lengths.values()) >= AL_FLOOR, lengths


def test_lilicorr_head_earns_its_cost(measured):
    lengths = acceptance_lengths(measured)
    assert lengths["lilicorr"] > lengths["dflash"], lengths
