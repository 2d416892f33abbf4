"""blockdraft.draft_length: the cost-aware drafted length and the step-cost curve it learns."""

import pytest

from blockdraft.draft_length import CostAwareDraftLength, StepCostCurve


def test_curve_is_a_line_through_the_medians():
    curve = StepCostCurve()
    for n, seconds in ((1, 0.010), (4, 0.016), (8, 0.024), (2, 0.012)):
        curve.record(n, seconds)
    assert curve.line() == pytest.approx((0.008, 0.002))
    assert curve.seconds(16) == pytest.approx(0.040)
    curve.record(2, 0.030)
    curve.record(2, 0.030)  # a machine slowed for two steps: the median at 2, and the line, follow
    assert curve.points()[1] == (2, 0.030)
    a, b = curve.line()
    assert 0 < b < 0.002 and a > 0.008


def test_curve_never_slopes_down_nor_starts_below_zero():
    flat = StepCostCurve()
    for n, seconds in ((1, 0.012), (8, 0.010)):  # noise: a larger window measured faster
        flat.record(n, seconds)
    assert flat.line() == pytest.approx((0.011, 0.0))
    steep = StepCostCurve()
    for n, seconds in ((2, 0.002), (4, 0.010)):  # the line through them starts below 0
        steep.record(n, seconds)
    a, b = steep.line()
    assert a == 0 and b == pytest.approx((2 * 0.002 + 4 * 0.010) / 20)


def test_curve_takes_the_median_of_recent_steps():
    curve = StepCostCurve(window=3)
    for seconds in (0.5, 0.010, 0.012, 0.011):  # the first (an idle gap) leaves the window
        curve.record(3, seconds)
    assert curve.seconds(3) == pytest.approx(0.011)


def warmed_up(chooser: CostAwareDraftLength, step_seconds, accepted_share: float) -> None:
    """Run the warm-up: each step times a window of ``step_seconds(n)`` and accepts that share
    of its draft (a prefix, as a verifier does)."""
    lengths = []
    while not chooser.warmed_up:
        k = chooser.choose(1)
        lengths.append(k)
        chooser.record_draft(0.002)
        chooser.record_step(k + 1, step_seconds(k + 1))
        chooser.record_acceptance([k], [int(k * accepted_share)])
    assert sorted(set(lengths)) == list(range(chooser.max_length + 1))


def test_cheap_verification_drafts_the_whole_block():
    chooser = CostAwareDraftLength(7)
    warmed_up(chooser, lambda n: 0.010, accepted_share=0.5)  # a GPU: any window costs a step
    assert [chooser.choose(1) for _ in range(7)].count(7) >= 6


def test_expensive_verification_drafts_less():
    chooser = CostAwareDraftLength(7)
    # every token of the window costs as much as a step, and a quarter of a draft is accepted
    warmed_up(chooser, lambda n: 0.010 * n, accepted_share=0.25)
    choices = [chooser.choose(1) for _ in range(7)]
    assert choices.count(0) >= 6


def test_length_follows_acceptance():
    chooser = CostAwareDraftLength(7)
    for _ in range(chooser.max_length * 2 + 2):
        chooser.choose(1)  # warm-up lengths, then measured below
    for n in range(1, 9):
        chooser.record_step(n, 0.010 + 0.001 * n)
    chooser.record_draft(0.001)
    # positions 1-2 always accepted, 3 and later never
    chooser.record_acceptance([7] * 50, [2] * 50)
    assert chooser.expected_tokens()[2] == pytest.approx(1 + 2 * 50.5 / 51)
    chosen = [chooser.choose(1) for _ in range(8)]
    assert chosen.count(2) >= 7


def test_acceptance_counts_only_the_positions_drafted():
    chooser = CostAwareDraftLength(4)
    chooser.record_acceptance([2, 4, 0], [2, 1, 0])
    expected = chooser.expected_tokens()
    # position 1: 2 of 2 accepted; 2: 1 of 2; 3 and 4: 0 of 1
    assert expected == pytest.approx([1, 1 + 2.5 / 3, 1 + 2.5 / 3 + 1.5 / 3,
                                      1 + 2.5 / 3 + 1.5 / 3 + 0.5 / 2,
                                      1 + 2.5 / 3 + 1.5 / 3 + 0.5 / 2 + 0.5 / 2])


def test_exploration_drafts_more_than_the_choice_never_less():
    chooser = CostAwareDraftLength(7)
    warmed_up(chooser, lambda n: 0.010 * n, accepted_share=0.25)  # the choice is 0
    assert sorted({chooser.choose(1) for _ in range(16)}) == [0, 2]
    cheap = CostAwareDraftLength(7)
    warmed_up(cheap, lambda n: 0.010, accepted_share=0.5)  # the choice is the whole block
    assert {cheap.choose(1) for _ in range(16)} == {7}
