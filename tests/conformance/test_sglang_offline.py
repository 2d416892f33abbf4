"""Conformance of SGLang's offline `Engine(speculative_algorithm="DSPARK", ...)`: the scenarios
an offline engine can run."""

from __future__ import annotations

import pytest

from .conftest import campaign_for, check
from .drivers.sglang_offline import SglangOfflineDriver
from .scenarios import SCENARIOS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", SglangOfflineDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_sglang_offline(scenario, method, reliability):
    check(campaign_for(SglangOfflineDriver).case(scenario, method), scenario, reliability)
