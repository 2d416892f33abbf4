"""Conformance of vLLM's offline `LLM(speculative_config=...)`: the scenarios an offline engine
can run, with upstream's DFlash (the control) and our "method":"lilicorr"."""

from __future__ import annotations

import pytest

from .conftest import campaign_for, check
from .drivers.vllm_offline import VllmOfflineDriver
from .scenarios import SCENARIOS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", VllmOfflineDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_vllm_offline(scenario, method, reliability):
    check(campaign_for(VllmOfflineDriver).case(scenario, method), scenario, reliability)
