"""Session-wide campaigns (one per engine), whose reports are written when the session ends."""

from __future__ import annotations

import pytest

from . import report
from .campaign import Campaign
from .scenarios import SCENARIOS

CAMPAIGNS: dict[str, Campaign] = {}


def campaign_for(driver_class) -> Campaign:
    if driver_class.engine not in CAMPAIGNS:
        CAMPAIGNS[driver_class.engine] = Campaign(driver_class(),
                                                  SCENARIOS + driver_class.extra_scenarios)
    return CAMPAIGNS[driver_class.engine]


def pytest_sessionfinish(session, exitstatus):
    for engine, campaign in CAMPAIGNS.items():
        if campaign.results:
            path = report.write(engine, campaign.results, {})
            print(f"\nconformance report: {path}")


def check(result, scenario, reliability) -> None:
    """A case passes, or passes on a listed near-tie; an unavailable one is skipped with its
    reason (shown in the summary and the report, never counted as passed). A load or fault
    scenario also gives its row of the reliability table."""
    if scenario.fault:
        reliability(result.engine, f"{scenario.fault} ({result.method})", outcome(result))
    if result.status == "not available":
        pytest.skip(f"not available: {result.reason}")
    assert result.status in ("pass", "near-tie"), result.reason


def outcome(result) -> str:
    if result.status in ("pass", "near-tie"):
        sent = result.equal.split("/")[1]
        return (f"{sent} requests sent, {sent} completed, {result.equal} equal to no speculation, "
                f"0 errors; AL {result.acceptance_length}; server healthy after")
    return f"{result.status}: {result.reason}"


def check_lilicorr_earns_its_cost(campaign: Campaign, scenario_name: str = "one_request") -> None:
    """As in the reference loop, the LiLiCorr head must pay for itself in the engine: over the
    in-domain prompts its acceptance length is at least that of the engine's own DFlash on the
    same backbone."""
    scenario = next(s for s in campaign.scenarios if s.name == scenario_name)
    by_drafter = {m.drafter: m for m in campaign.driver.methods}
    control, lilicorr = (campaign.acceptance_length(scenario, by_drafter[kind])
                         for kind in ("dflash", "lilicorr"))
    print(f"{campaign.driver.engine} {scenario.name}: AL dflash {control:.3f}, lilicorr {lilicorr:.3f}")
    assert lilicorr >= control, f"LiLiCorr AL {lilicorr:.3f} < DFlash control's {control:.3f}"
