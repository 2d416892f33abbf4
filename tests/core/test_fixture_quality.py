"""The committed fixtures, as materialised by ci/setup.sh, meet the quality floor.

The manifest (and REPORT.md) record, for every drafter, what the reference loop measured on each
of the builder's held-out in-domain prompts. Here the reference loop measures every
SAMPLE_EVERY-th of those prompts again and must reproduce their records prompt by prompt; the
floors are then asserted on the records of all the prompts. (`python -m blockdraft.fixtures
evaluate` re-measures all of them: an eighth of the time in CI, the same evidence per prompt.)
The benchmark family (a 45M-parameter target) is sampled more thinly, with a cached target."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from blockdraft.fixtures.evaluate import DrafterQuality, measure_family, plan_prompts
from blockdraft.fixtures.shapes import BuildPlan, GrowthPlan
from blockdraft.fixtures.store import file_digest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "build" / "fixtures"
AL_FLOOR = 3.0  # the quality floor of every drafter at NUM_DRAFT drafted tokens
NUM_DRAFT = 7
SAMPLE_EVERY = 8  # 25 of the 200 prompts
# prompts of the sample whose (drafts, accepted) may differ from the record: another CPU's
# float32 kernels can tip a near-tie of the target (fixtures/REPORT.md gives the gaps)
TIPPED_PROMPTS = 1
MANIFEST = json.loads((REPO / "fixtures/manifest.json").read_text())
FAMILIES = ["qwen3", "lfm2"]
BENCH_FAMILY = "qwen3_bench"
ALL_FAMILIES = [*FAMILIES, BENCH_FAMILY]
SAMPLE_EVERY_BENCH = 50  # 4 prompts: the 45M-parameter target costs most of the suite
# the committed store: the conformance families, and the benchmark family's own budget
STORE_BUDGET_BYTES = {"small": 30e6, BENCH_FAMILY: 60e6}
KINDS = ("dflash", "lilicorr", "dspark")


def family_record(family: str) -> dict:
    return MANIFEST["grown"][family] if family == BENCH_FAMILY else MANIFEST["targets"][family]


def recorded(family: str) -> dict[str, DrafterQuality]:
    """What the manifest records for each drafter at NUM_DRAFT drafted tokens, on every prompt."""
    drafters = family_record(family)["drafters"]
    assert all(drafters[kind]["num_draft"] == NUM_DRAFT for kind in KINDS)
    return {kind: DrafterQuality.from_dict(drafters[kind]) for kind in KINDS}


def recorded_lengths(family: str) -> dict[str, float]:
    return {kind: round(q.acceptance_length, 3) for kind, q in recorded(family).items()}


def test_store_matches_its_manifest():
    for name, entry in MANIFEST["files"].items():
        assert file_digest(REPO / "fixtures" / name) == entry["sha256"], name
    sizes = {"small": 0, BENCH_FAMILY: 0}
    for name, entry in MANIFEST["files"].items():
        sizes[BENCH_FAMILY if name.startswith(f"models/{BENCH_FAMILY}/") else "small"] += entry["bytes"]
    assert all(sizes[part] < budget for part, budget in STORE_BUDGET_BYTES.items()), sizes


def test_fixtures_follow_the_default_plan():
    """The committed fixtures are what `python -m blockdraft.fixtures build` and `grow` plan
    today."""
    assert MANIFEST["plan"] == json.loads(json.dumps(asdict(BuildPlan())))
    assert family_record(BENCH_FAMILY)["growth"] == json.loads(json.dumps(asdict(GrowthPlan())))


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_records_add_up_to_the_report(family):
    """The per-prompt records are the ones the reported figures come from."""
    drafters = family_record(family)["drafters"]
    for kind, quality in recorded(family).items():
        assert quality.prompts == MANIFEST["plan"]["budget"]["eval_prompts"]
        assert round(quality.acceptance_length, 3) == drafters[kind]["acceptance_length"], kind
        assert quality.drafts == drafters[kind]["drafts"], kind
        assert [round(x, 3) for x in quality.interval] == drafters[kind]["interval_95"], kind


def sample_every(family: str) -> int:
    return SAMPLE_EVERY_BENCH if family == BENCH_FAMILY else SAMPLE_EVERY


@pytest.fixture(scope="module", params=ALL_FAMILIES)
def sampled(request) -> tuple[str, dict[str, DrafterQuality]]:
    """(family, quality per drafter) measured here on the sample of the report's prompts."""
    family = request.param
    folder = FIXTURES / family
    tokenizer = Tokenizer.from_file(str(folder / "target/tokenizer.json"))
    prompts = plan_prompts(MANIFEST["plan"], REPO / "fixtures/corpus/stdlib.jsonl.xz", tokenizer)
    every = sample_every(family)
    _, quality = measure_family(folder, prompts[::every],
                                MANIFEST["plan"]["budget"]["eval_new_tokens"],
                                {kind: (kind, NUM_DRAFT) for kind in KINDS},
                                cached=family == BENCH_FAMILY)
    print(f"{family}: {len(prompts[::every])} of {len(prompts)} prompts at {NUM_DRAFT} "
          "drafted tokens: " + ", ".join(f"{kind} AL {q.acceptance_length:.3f}"
                                         for kind, q in quality.items()))
    return family, quality


def test_sample_reproduces_the_records(sampled):
    family, quality = sampled
    for kind, record in recorded(family).items():
        every = sample_every(family)
        expected = record.per_prompt[::every]
        tipped = [(i * every, want, got) for i, (want, got)
                  in enumerate(zip(expected, quality[kind].per_prompt)) if want != got]
        assert len(quality[kind].per_prompt) == len(expected)
        assert len(tipped) <= TIPPED_PROMPTS, f"{kind}: (prompt, recorded, measured) {tipped}"


def test_speculation_is_lossless(sampled):
    for kind, q in sampled[1].items():
        assert q.lossless == q.prompts, f"{kind}: {q.lossless}/{q.prompts} outputs equal plain greedy"


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_drafters_reach_the_acceptance_floor(family):
    lengths = recorded_lengths(family)
    assert min(lengths.values()) >= AL_FLOOR, lengths


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_lilicorr_head_earns_its_cost(family):
    lengths = recorded_lengths(family)
    assert lengths["lilicorr"] > lengths["dflash"], lengths
