"""Conformance of llama-server: every scenario with draft-dflash (the control, plain DFlash
GGUF), draft-dflash with a LiLiCorr GGUF, and DSpark with --spark-block-size."""

from __future__ import annotations

import pytest

from .conftest import campaign_for, check, check_lilicorr_earns_its_cost
from .drivers.llamacpp import LlamaCppDriver
from .scenarios import SCENARIOS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", LlamaCppDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_llamacpp(scenario, method, reliability):
    check(campaign_for(LlamaCppDriver).case(scenario, method), scenario, reliability)


def test_lilicorr_accepts_at_least_the_dflash_control():
    check_lilicorr_earns_its_cost(campaign_for(LlamaCppDriver))
