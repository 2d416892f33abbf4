"""The lattice head, not the backbone's argmax, picks LiLiCorr's drafts in vLLM.

Drafters with a hand-set head (lilicorr_checkpoints.lilicorr_with_fixed_rank) on the DFlash
fixture's backbone: walking through candidate 0 of every slot must draft exactly what upstream
DFlash drafts (same tokens, same counters); walking through candidate 1 must be followed (fewer
tokens accepted) and stay lossless. The rank-1 drafter runs through the offline `LLM(...)` API,
the rank-0 one on a server that also drafts probabilistically for sampled requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from lilicorr_checkpoints import lilicorr_with_fixed_rank
from tests.conformance.drivers.vllm import (CHUNK_TOKENS, ENV, completion, serve, spec_counters,
                                            speculative_args)

pytestmark = pytest.mark.slow
NUM_SLOTS = 7
MAX_TOKENS = 48


def greedy(engine, prompts) -> list[list[int]]:
    """Each prompt on its own (one request at a time: exact fp32 numerics)."""
    return [completion(engine, [p], MAX_TOKENS)[0]["token_ids"] for p in prompts]


@pytest.fixture(scope="module")
def control(target, dflash, in_domain_prompts):
    """Upstream DFlash on the same backbone: token ids and counters on the in-domain prompts."""
    with serve("test-dflash", target, *speculative_args(
            "dflash", dflash, num_speculative_tokens=NUM_SLOTS)) as engine:
        before = spec_counters(engine)
        tokens = greedy(engine, in_domain_prompts)
        return tokens, spec_counters(engine) - before


@pytest.fixture(scope="module")
def drafters(tmp_path_factory, dflash):
    root = tmp_path_factory.mktemp("drafters")
    return {rank: lilicorr_with_fixed_rank(dflash, root / f"rank{rank}", rank) for rank in (0, 1)}


@pytest.fixture(scope="module")
def rank0(target, drafters):
    with serve("test-lilicorr-rank0", target, *speculative_args(
            "lilicorr", drafters[0], draft_sample_method="probabilistic")) as engine:
        yield engine


def test_rank0_head_drafts_exactly_what_dflash_drafts(rank0, control, in_domain_prompts):
    before = spec_counters(rank0)
    tokens = greedy(rank0, in_domain_prompts)
    counters = spec_counters(rank0) - before
    control_tokens, control_counters = control
    assert tokens == control_tokens
    assert control_counters.accepted_tokens > 0
    assert counters == control_counters  # same drafts, so the same acceptance, count for count


def test_probabilistic_drafting_keeps_greedy_requests_exact(rank0, control, in_domain_prompts):
    """Sampled and greedy requests in flight together: the greedy ones stay exact, the sampled
    ones are drawn through sample_walk with its proposal handed to the rejection sampler."""
    before = spec_counters(rank0)
    with ThreadPoolExecutor(2) as pool:
        # unseeded: vLLM 0.32 on CPU dies rewinding a seeded request's generator when its
        # prompt is prefilled in chunks ("CPU Generator does not use offset")
        sampled = pool.submit(completion, rank0, in_domain_prompts, 40, temperature=1.0,
                              ignore_eos=True)
        greedy_tokens = pool.submit(greedy, rank0, in_domain_prompts)
        sampled_choices, greedy_tokens = sampled.result(), greedy_tokens.result()
    counters = spec_counters(rank0) - before
    assert greedy_tokens == control[0]
    assert [len(c["token_ids"]) for c in sampled_choices] == [40] * len(in_domain_prompts)
    assert 0 < counters.accepted_tokens <= counters.draft_tokens


def test_offline_llm_follows_the_rank1_head(target, drafters, control, in_domain_prompts):
    code = f"""
        import json
        from vllm import LLM, SamplingParams
        llm = LLM(model={str(target)!r}, dtype="float32", enforce_eager=True, seed=0,
                  max_model_len=2048, max_num_batched_tokens={CHUNK_TOKENS},
                  enable_prefix_caching=True, disable_log_stats=False,
                  speculative_config={{"method": "lilicorr", "model": {str(drafters[1])!r}}})
        params = SamplingParams(max_tokens={MAX_TOKENS}, temperature=0.0)
        tokens = [list(llm.generate({{"prompt_token_ids": p}}, params, use_tqdm=False)[0]
                       .outputs[0].token_ids) for p in {in_domain_prompts!r}]
        names = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens")
        counters = {{m.name: m.value for m in llm.get_metrics() if m.name in names}}
        print("RESULT", json.dumps({{"tokens": tokens, "counters": counters}}))
    """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=900, env={**os.environ, **ENV})
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])
    control_tokens, control_counters = control
    assert got["tokens"] == control_tokens
    assert got["counters"]["vllm:spec_decode_num_drafts"] > 0
    accepted = got["counters"]["vllm:spec_decode_num_accepted_tokens"]
    assert accepted < control_counters.accepted_tokens  # the rank-1 path, not DFlash's
