"""Conformance of llama-server: every scenario with draft-dflash (the control, plain DFlash
GGUF), draft-dflash with a LiLiCorr GGUF, and DSpark with --spark-block-size; the key scenarios
with each of them cost-aware (--spec-draft-cost-aware); and SPEC.md's two llama-server commands
on the fixture builder's held-out prompts (issue 7)."""

from __future__ import annotations

import pytest

from .conftest import (campaign_for, check, check_gaps_match_the_reference,
                       check_lilicorr_earns_its_cost)
from .drivers.base import COST_AWARE_SCENARIOS
from .drivers.llamacpp import LlamaCppDriver
from .scenarios import HELD_OUT_SCENARIOS, SCENARIOS, TWO_SLOTS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", LlamaCppDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", (*SCENARIOS, TWO_SLOTS), ids=lambda s: s.name)
def test_llamacpp(scenario, method, reliability):
    check(campaign_for(LlamaCppDriver).case(scenario, method), scenario, reliability)


@pytest.mark.parametrize("method", LlamaCppDriver.cost_aware_methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.name in COST_AWARE_SCENARIOS],
                         ids=lambda s: s.name)
def test_llamacpp_cost_aware(scenario, method, reliability):
    """Each command again with --spec-draft-cost-aware: steps draft 0 to the fixed length."""
    check(campaign_for(LlamaCppDriver).case(scenario, method), scenario, reliability)


def test_lilicorr_accepts_at_least_the_dflash_control():
    check_lilicorr_earns_its_cost(campaign_for(LlamaCppDriver))


# SPEC.md's commands: a text target with a LiLiCorr drafter (beside upstream's DFlash control),
# the vision target with DSpark
@pytest.mark.parametrize("scenario, method_name", [
    (HELD_OUT_SCENARIOS[0], "draft-dflash"), (HELD_OUT_SCENARIOS[0], "draft-dflash-lilicorr"),
    (HELD_OUT_SCENARIOS[1], "draft-dspark")], ids=["dflash", "lilicorr", "dspark-vision"])
def test_spec_commands_on_held_out_prompts(scenario, method_name, reliability):
    method = next(m for m in LlamaCppDriver.methods if m.name == method_name)
    check(campaign_for(LlamaCppDriver).case(scenario, method), scenario, reliability)


@pytest.mark.parametrize("scenario", HELD_OUT_SCENARIOS, ids=lambda s: s.name)
def test_lilicorr_accepts_at_least_the_dflash_control_on_held_out_prompts(scenario):
    check_lilicorr_earns_its_cost(campaign_for(LlamaCppDriver), scenario.name)


def test_baseline_gaps_match_the_float32_reference():
    check_gaps_match_the_reference(campaign_for(LlamaCppDriver))
