"""The verdict against the float32 reference, on a real near-tie of the Qwen3 fixture (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from blockdraft.verdict import NEAR_TIE_EPSILON, first_difference, reference_for
from tests.conformance.prompts import prompt_set

TARGET = Path(__file__).resolve().parents[2] / "build/fixtures/qwen3/target"
TIE = 71  # the generated token where the reference's " return" and " if" are 0.0072 apart


@pytest.fixture(scope="module")
def tie():
    """The prompt, the reference's greedy tokens up to and including the tie, and the
    runner-up there."""
    reference = reference_for(TARGET)
    prompt = list(prompt_set("near_tie")[0].prompt_ids)
    greedy = []
    for _ in range(TIE + 1):
        greedy.append(int(reference.next_logits(prompt + greedy).argmax()))
    runner_up = int(torch.topk(reference.next_logits(prompt + greedy[:TIE]), 2).indices[1])
    return reference, prompt, greedy, runner_up


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_the_regression_prompt_reaches_a_real_near_tie(tie):
    reference, prompt, greedy, runner_up = tie
    v = reference.judge(prompt, greedy, greedy[:TIE] + [runner_up])
    assert v.kind == "near-tie" and v.position == TIE and 0 < v.gap < NEAR_TIE_EPSILON, v
    assert v.matches == "baseline" and "baseline matches the reference" in str(v)


def test_speculation_matching_the_reference_at_the_tie_is_not_a_bug(tie):
    """SGLang's case: its plain decode took the runner-up, DSPARK the reference's token."""
    reference, prompt, greedy, runner_up = tie
    v = reference.judge(prompt, greedy[:TIE] + [runner_up], greedy)
    assert v.kind == "near-tie" and v.matches == "speculation" and not v.is_bug


def test_departing_where_the_target_is_sure_is_a_bug(tie):
    reference, prompt, greedy, _ = tie
    clear = next(i for i in range(TIE) if float(torch.topk(
        reference.next_logits(prompt + greedy[:i]), 2).values.diff().abs()) > 1.0)
    wrong = greedy[:clear] + [(greedy[clear] + 1) % 1000]
    v = reference.judge(prompt, greedy, wrong)
    assert v.is_bug and v.position == clear and str(v).startswith("BUG"), v
    assert reference.judge(prompt, wrong, greedy).kind == "baseline-departs"


def test_ending_early_where_the_reference_goes_on_is_a_bug(tie):
    reference, prompt, greedy, _ = tie
    v = reference.judge(prompt, greedy, greedy[:10])
    assert v.is_bug and v.speculative_token == -1
