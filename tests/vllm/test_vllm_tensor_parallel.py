"""tensor_parallel_size=2 on vLLM's CPU backend: LiLiCorr output equals the plain TP=2 server's.

Ranks are bound to cores 0 and 1 (VLLM_CPU_OMP_THREADS_BIND="0|1"): vLLM's automatic binding
wants one NUMA node per rank and refuses ("Not enough allowed NUMA nodes to bind threads of 2
local CPUWorkers") on a single-node machine.
"""

from __future__ import annotations

import pytest

import vllm_scenarios
from vllm_scenarios import first_divergence
from vllm_server import speculative, start_server

pytestmark = pytest.mark.slow
TP_ARGS = ("--tensor-parallel-size", "2")
TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
CASES = ["single", "batch8"]


@pytest.fixture(scope="module")
def plain_tp2(request, target):
    server = start_server(request, "plain_tp2", target, *TP_ARGS, env=TP_ENV)
    outcomes = vllm_scenarios.run(server, CASES)
    server.stop()
    return outcomes


@pytest.fixture(scope="module")
def lilicorr_tp2(request, target, lilicorr):
    server = start_server(request, "lilicorr_tp2", target, *TP_ARGS,
                          *speculative("lilicorr", lilicorr), env=TP_ENV)
    outcomes = vllm_scenarios.run(server, CASES)
    server.stop()
    return outcomes


@pytest.mark.parametrize("name", CASES)
def test_lilicorr_tp2_greedy_equals_plain_tp2(plain_tp2, lilicorr_tp2, name, trained_floor):
    assert first_divergence(plain_tp2[name].token_ids, lilicorr_tp2[name].token_ids) is None
    counts = lilicorr_tp2[name].counts
    assert counts.drafts > 0 and counts.accepted <= counts.draft_tokens
    if trained_floor is not None:
        assert counts.acceptance_length > 1.5, counts
