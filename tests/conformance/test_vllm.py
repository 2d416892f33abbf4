"""Conformance of `vllm serve`: every scenario with upstream's DFlash (the control) and our
"method":"lilicorr" on the same backbone; the key scenarios with "cost_aware": true."""

from __future__ import annotations

import pytest

from .conftest import campaign_for, check, check_gaps_match_the_reference, check_lilicorr_earns_its_cost
from .drivers.base import COST_AWARE_SCENARIOS
from .drivers.vllm import VllmDriver
from .scenarios import SCENARIOS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", VllmDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_vllm(scenario, method, reliability):
    check(campaign_for(VllmDriver).case(scenario, method), scenario, reliability)


# LiLiCorr only: the DFlash control runs the same proposer code (LiLiCorrProposer serves both),
# and each vLLM start-up costs about 40 s of the CI budget
@pytest.mark.parametrize("method", [m for m in VllmDriver.cost_aware_methods if m.ours],
                         ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name in COST_AWARE_SCENARIOS],
                         ids=lambda s: s.name)
def test_vllm_cost_aware(scenario, method, reliability):
    """With "cost_aware": true each step verifies 0 to num_speculative_tokens drafted tokens."""
    check(campaign_for(VllmDriver).case(scenario, method), scenario, reliability)


def test_lilicorr_accepts_at_least_the_dflash_control():
    check_lilicorr_earns_its_cost(campaign_for(VllmDriver))


def test_baseline_gaps_match_the_float32_reference():
    check_gaps_match_the_reference(campaign_for(VllmDriver))
