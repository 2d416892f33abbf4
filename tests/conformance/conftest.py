"""Session-wide campaigns (one per engine), whose reports are written when the session ends."""

from __future__ import annotations

import pytest

from blockdraft.verdict import NEAR_TIE_EPSILON

from . import report
from .campaign import Campaign
from .prompts import prompt_set
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
        reliability(result.engine, f"{scenario.fault} ({result.method})", outcome(result, scenario))
    if result.status == "not available":
        pytest.skip(f"not available: {result.reason}")
    assert result.status in ("pass", "near-tie"), result.reason


def outcome(result, scenario) -> str:
    if result.status not in ("pass", "near-tie"):
        return f"{result.status}: {result.reason}"
    if scenario.shutdown:
        return (f"the server exited {result.seconds} s after SIGTERM, every process of its group "
                f"gone, every stream closed; AL {result.acceptance_length} before the signal")
    outputs = result.outputs
    sent = (f"{outputs // scenario.choices} requests of {scenario.choices} completions"
            if scenario.choices > 1 else f"{outputs} requests")
    equal = (f"{result.equal} equal to no speculation" if scenario.compares_outputs
             else "sampled (not compared), every one finished")
    differing = "".join(f"; {d.describe()}" for d in result.divergences)
    figures = [f"AL {result.acceptance_length}"]
    if scenario.logprobs:
        figures.append(f"top-2 log-probs within {result.logprob_deviation:.1e} of no speculation")
    if scenario.json_schema:
        figures.append("every output parses as the schema's object")
    if scenario.in_flight:
        ratio = result.tokens_per_second / max(result.baseline_tokens_per_second, 1e-9)
        figures.append(f"{result.tokens_per_second} tok/s against {result.baseline_tokens_per_second} "
                       f"without ({ratio:.2f}x), {result.seconds} s")
    if result.streams_cut:
        figures.append(f"before them {result.streams_cut} clients left mid-step, in the verify "
                       f"forward ({result.cut_after_ms} ms after their last chunk, steps of "
                       f"{result.cut_step_ms} ms, medians; no chunk between), their requests "
                       "released")
    if result.peak_mb:
        figures.append(f"peak RSS {result.peak_mb:.0f} MB ({result.baseline_peak_mb:.0f} MB without)")
    return (f"{sent} sent, {outputs} completed, {equal}"
            f"{differing}, 0 errors; " + "; ".join(figures) + "; server healthy after")


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


def check_gaps_match_the_reference(campaign: Campaign, scenario_name: str = "one_request") -> None:
    """NEAR_TIE_EPSILON's premise, re-measured in every run: in float32 the engine's own
    top1-top2 gaps (its top-2 log-probs without speculation) stay far below it from the float32
    reference's, so a flip of a gap of NEAR_TIE_EPSILON or more is not rounding."""
    scenario = next(s for s in campaign.scenarios if s.name == scenario_name)
    reference = campaign.reference(scenario)
    deviations = [abs(top[0] - top[1] - gap)
                  for request, output in zip(prompt_set(scenario.prompts),
                                             campaign.baseline(scenario).outputs)
                  for top, gap in zip(output.top2_logprobs or [],
                                      reference.gaps(request.prompt_ids, output.token_ids))]
    assert deviations, "the baseline returned no top-2 log-probs"
    deviations.sort()
    print(f"{campaign.driver.engine} {scenario.name}: |engine gap - reference gap| over "
          f"{len(deviations)} positions: median {deviations[len(deviations) // 2]:.1e}, "
          f"max {deviations[-1]:.1e}")
    assert deviations[-1] < NEAR_TIE_EPSILON / 10, (
        f"the engine's gaps are up to {deviations[-1]:.4f} off the float32 reference's: "
        f"not float32 noise, so NEAR_TIE_EPSILON ({NEAR_TIE_EPSILON}) would hide real departures")
