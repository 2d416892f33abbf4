"""Conformance of SGLang's launch_server on CPU: every scenario with DSPARK (our plugin)."""

from __future__ import annotations

import pytest

from .conftest import campaign_for, check
from .drivers.sglang import SglangDriver
from .scenarios import SCENARIOS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", SglangDriver.methods, ids=lambda m: m.name)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_sglang(scenario, method):
    check(campaign_for(SglangDriver).case(scenario, method))
