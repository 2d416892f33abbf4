"""`vllm serve TARGET --speculative-config '{"method":"lilicorr",...}'` end to end.

Every scenario runs on a plain server and on the LiLiCorr server (default draft length, i.e.
block_size - 1); greedy fp32 token ids must be equal and vLLM's counters must show drafts.
The DFlash control runs the in-domain prompts on the same backbone, and so does a LiLiCorr
drafter whose head always walks through rank 0 (it must draft exactly what DFlash drafts), on
a server that also drafts probabilistically for sampled requests.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

import vllm_scenarios
from vllm_scenarios import first_divergence
from lilicorr_checkpoints import lilicorr_with_fixed_rank
from vllm_server import VLLM, speculative, start_server

pytestmark = pytest.mark.slow
NUM_SLOTS = 7  # block_size - 1 of the fixtures' drafters


def report(reports, name: str, outcome) -> None:
    c = outcome.counts
    record = {"case": name, "drafts": c.drafts, "draft_tokens": c.draft_tokens,
              "accepted": c.accepted, "acceptance_length": c.acceptance_length,
              "seconds": round(outcome.seconds, 2)}
    with open(reports / "serve_cases.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


@pytest.fixture(scope="module")
def plain(request, target):
    server = start_server(request, "plain", target)
    outcomes = vllm_scenarios.run(server)
    server.stop()
    return outcomes


@pytest.fixture(scope="module")
def lilicorr_server(request, target, lilicorr):
    return start_server(request, "lilicorr", target, *speculative("lilicorr", lilicorr))


@pytest.fixture(scope="module")
def lilicorr_outcomes(lilicorr_server, reports):
    outcomes = vllm_scenarios.run(lilicorr_server)
    for name, outcome in outcomes.items():
        report(reports, f"lilicorr/{name}", outcome)
    return outcomes


@pytest.fixture(scope="module")
def dflash_single(request, target, dflash, reports):
    server = start_server(request, "dflash", target,
                          *speculative("dflash", dflash, num_speculative_tokens=NUM_SLOTS))
    outcome = vllm_scenarios.run(server, ["single"])["single"]
    server.stop()
    report(reports, "dflash/single", outcome)
    return outcome


@pytest.mark.parametrize("name", list(vllm_scenarios.SCENARIOS))
def test_lilicorr_greedy_equals_plain(plain, lilicorr_outcomes, name, trained_floor):
    outcome = lilicorr_outcomes[name]
    assert first_divergence(plain[name].token_ids, outcome.token_ids) is None
    counts = outcome.counts
    assert counts.drafts > 0, "no drafts: speculation did not run"
    assert counts.draft_tokens <= NUM_SLOTS * counts.drafts
    assert counts.accepted <= counts.draft_tokens
    if trained_floor is not None and name != "short_max_tokens":
        assert counts.acceptance_length > 1.5, counts


def test_in_domain_acceptance_floor(lilicorr_outcomes, trained_floor):
    if trained_floor is None:
        pytest.skip("untrained stand-in fixtures: no acceptance floor to hold them to")
    assert lilicorr_outcomes["single"].counts.acceptance_length >= trained_floor


def test_acceptance_at_least_dflash_control(lilicorr_outcomes, dflash_single, plain,
                                            trained_floor):
    assert first_divergence(plain["single"].token_ids, dflash_single.token_ids) is None
    assert dflash_single.counts.drafts > 0
    if trained_floor is None:
        pytest.skip("untrained stand-in fixtures: acceptance lengths are noise around 1")
    ours, control = lilicorr_outcomes["single"].counts, dflash_single.counts
    assert ours.acceptance_length >= control.acceptance_length, (ours, control)


def test_our_v1_proposer_drafted(lilicorr_outcomes, lilicorr_server):
    log = lilicorr_server.log.read_text(errors="replace")
    assert "LiLiCorr drafting on the V1 model runner: 7 slots x top-4 candidates" in log
    assert "SpecDecoding metrics" in log  # vLLM's own periodic log line reports our drafts


def test_vllm_bench_serve_reports_our_drafts(lilicorr_outcomes, lilicorr_server):
    result = subprocess.run(
        [VLLM, "bench", "serve", "--backend", "vllm", "--base-url", lilicorr_server.url,
         "--model", lilicorr_server.model, "--dataset-name", "random", "--random-input-len", "32",
         "--random-output-len", "32", "--num-prompts", "4", "--max-concurrency", "1",
         "--temperature", "0", "--ignore-eos", "--seed", "0"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    section = result.stdout.split("Speculative Decoding", 1)[1]
    drafts = int(re.search(r"Drafts:\s+(\d+)", section).group(1))
    draft_tokens = int(re.search(r"Draft tokens:\s+(\d+)", section).group(1))
    assert drafts > 0 and 0 < draft_tokens <= NUM_SLOTS * drafts


def test_prefix_cache_was_hit(lilicorr_outcomes, lilicorr_server):
    hits, = lilicorr_server.counters("vllm:prefix_cache_hits_total")
    assert hits > 0  # later shared-prefix requests started from cached blocks


def test_long_prompt_exceeds_the_prefill_chunk(target):
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(target)(vllm_scenarios.LONG_PROMPT)["input_ids"]
    assert len(tokens) > 256  # --max-num-batched-tokens: the prefill had to be chunked


def test_sampled_requests_finish_with_sane_counts(lilicorr_server):
    before = lilicorr_server.spec_counts()
    outputs = lilicorr_server.complete(vllm_scenarios.PROMPTS[:4], max_tokens=40, temperature=0.8,
                                       seed=1)
    counts = lilicorr_server.spec_counts() - before
    assert [len(o) for o in outputs] == [40] * 4
    assert counts.drafts > 0 and counts.accepted <= counts.draft_tokens


@pytest.fixture(scope="module")
def rank0_server(request, target, dflash, tmp_path_factory):
    drafter = lilicorr_with_fixed_rank(dflash, tmp_path_factory.mktemp("drafters") / "rank0", 0)
    return start_server(request, "lilicorr_rank0", target,
                        *speculative("lilicorr", drafter, num_speculative_tokens=NUM_SLOTS,
                                     draft_sample_method="probabilistic"))


def test_rank0_head_drafts_exactly_what_dflash_drafts(rank0_server, dflash_single, plain):
    outcome = vllm_scenarios.run(rank0_server, ["single"])["single"]
    assert first_divergence(plain["single"].token_ids, outcome.token_ids) is None
    assert outcome.counts == dflash_single.counts  # same drafts -> same acceptance, per count


def test_rank1_head_is_followed(request, target, dflash, tmp_path_factory, dflash_single, plain):
    """A head that always walks through the second candidate drafts other tokens than DFlash:
    the path really comes from the head, and verification still keeps the output exact."""
    if dflash_single.counts.accepted == 0:
        pytest.skip("the DFlash control accepts nothing on these fixtures: nothing to undercut")
    drafter = lilicorr_with_fixed_rank(dflash, tmp_path_factory.mktemp("drafters") / "rank1", 1)
    server = start_server(request, "lilicorr_rank1", target,
                          *speculative("lilicorr", drafter, num_speculative_tokens=NUM_SLOTS))
    outcome = vllm_scenarios.run(server, ["single"])["single"]
    server.stop()
    assert first_divergence(plain["single"].token_ids, outcome.token_ids) is None
    assert outcome.counts.drafts > 0
    assert outcome.counts.accepted < dflash_single.counts.accepted


def test_probabilistic_drafting_keeps_greedy_requests_exact(rank0_server, plain):
    """Sampled and greedy requests in flight together: the greedy ones stay exact, the sampled
    ones are drawn through sample_walk with their proposal handed to the rejection sampler."""
    from concurrent.futures import ThreadPoolExecutor

    before = rank0_server.spec_counts()
    with ThreadPoolExecutor(2) as pool:
        sampled = pool.submit(rank0_server.complete, vllm_scenarios.PROMPTS[:4], 40,
                              temperature=1.0, seed=3)
        greedy = pool.submit(rank0_server.complete, vllm_scenarios.PROMPTS, 48)
        greedy_ids, sampled_ids = greedy.result(), sampled.result()
    counts = rank0_server.spec_counts() - before
    assert first_divergence(plain["single"].token_ids, greedy_ids) is None
    assert [len(o) for o in sampled_ids] == [40] * 4
    assert counts.drafts > 0 and counts.accepted <= counts.draft_tokens
