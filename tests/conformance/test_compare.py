"""The case verdicts (pure logic; no engine)."""

from __future__ import annotations

import json

import torch

from blockdraft.verdict import NEAR_TIE_EPSILON, judge_outputs

from .compare import Counters, Output, Run, first_divergence, judge, schema_violation
from .prompts import Request
from .scenarios import STRUCTURED_SCHEMA, Scenario

EXACT = Scenario("s", "axis", "in_domain", max_tokens=5, exact=True, al_floor=2.0)
LOOSE = Scenario("s", "axis", "in_domain", max_tokens=5, al_floor=2.0)
GOOD = Counters(drafts=2, draft_tokens=14, accepted_tokens=6)      # AL 4


def run(*token_lists, top2=None, counters=GOOD):
    return Run([Output(list(t), top2) for t in token_lists], counters, 1.0)


def test_equal_outputs_with_acceptance_pass():
    r = judge("e", EXACT, "m", "f", run([1, 2, 3]), run([1, 2, 3]), 7)
    assert (r.status, r.equal, r.acceptance_length) == ("pass", "1/1", 4.0)


def test_equal_outputs_without_acceptance_fail():
    """The acceptance-1.0 bugs: equal output proves nothing if nothing was accepted."""
    r = judge("e", EXACT, "m", "f", run([1, 2]), run([1, 2], counters=Counters(3, 21, 0)), 7)
    assert r.status == "fail" and "accepted nothing" in r.reason


def test_acceptance_below_floor_fails():
    r = judge("e", EXACT, "m", "f", run([1]), run([1], counters=Counters(10, 70, 5)), 7)
    assert r.status == "fail" and "< floor 2.0" in r.reason


def test_impossible_acceptance_length_fails():
    r = judge("e", EXACT, "m", "f", run([1]), run([1], counters=Counters(1, 7, 9)), 7)
    assert r.status == "fail" and "outside 1..8" in r.reason


def test_cost_aware_run_whose_engine_never_chose_a_length_fails():
    """The option must have reached the engine: it logged its step costs. Drafting the whole
    block every step is no evidence either way (where verifying costs a step, that is right)."""
    chosen = run([1])
    chosen.chose_lengths = True
    assert judge("e", EXACT, "m", "f", run([1]), chosen, 7, cost_aware=True).status == "pass"
    ignored = judge("e", EXACT, "m", "f", run([1]), run([1]), 7, cost_aware=True)
    assert ignored.status == "fail" and "did not reach the engine" in ignored.reason


def test_overshooting_max_tokens_fails():
    r = judge("e", LOOSE, "m", "f", run([1] * 5), run([1] * 6), 7)
    assert r.status == "fail" and "> max_tokens 5" in r.reason


def test_divergence_fails_where_numerics_are_controlled():
    top2 = [[-0.1, -0.1 - NEAR_TIE_EPSILON / 2]] * 3
    r = judge("e", EXACT, "m", "f", run([1, 2, 3], top2=top2), run([1, 9, 3]), 7)
    assert r.status == "fail" and "diverges at token 1" in r.reason


def test_near_tie_divergence_is_accepted_and_listed_elsewhere():
    top2 = [[-0.1, -0.1 - NEAR_TIE_EPSILON / 2]] * 3
    r = judge("e", LOOSE, "m", "f", run([1, 2, 3], top2=top2), run([1, 9, 3]), 7)
    assert r.status == "near-tie" and r.divergences[0].position == 1


def test_clear_divergence_fails_everywhere():
    top2 = [[-0.1, -5.0]] * 3
    r = judge("e", LOOSE, "m", "f", run([1, 2, 3], top2=top2), run([1, 9, 3]), 7)
    assert r.status == "fail"


def test_length_difference_is_a_divergence():
    assert first_divergence(Output([1, 2]), Output([1, 2, 3])) == 2
    assert first_divergence(Output([1, 2]), Output([1, 2])) is None


def test_sampled_runs_are_not_compared_but_must_finish():
    hot = Scenario("t", "axis", "in_domain", max_tokens=5, temperature=0.8)
    assert judge("e", hot, "m", "f", run([1, 2]), run([7, 8]), 7).status == "pass"
    assert judge("e", hot, "m", "f", run([1, 2]), run([]), 7).status == "fail"


def streamed(text: str, tokens: int = 3) -> Output:
    return Output([], streamed_text=text, streamed_tokens=tokens)


def test_streamed_outputs_are_compared_by_text():
    base = Run([streamed("def f(x):")], GOOD, 1.0)
    assert judge("e", LOOSE, "m", "f", base, Run([streamed("def f(x):")], GOOD, 1.0), 7).status == "pass"
    r = judge("e", LOOSE, "m", "f", base, Run([streamed("def f(y):")], GOOD, 1.0), 7)
    assert r.status == "fail" and "diverges at character 6" in r.reason


def test_streamed_outputs_count_the_servers_tokens():
    base = Run([streamed("abc", tokens=5)], GOOD, 1.0)
    r = judge("e", LOOSE, "m", "f", base, Run([streamed("abc", tokens=6)], GOOD, 1.0), 7)
    assert r.status == "fail" and "6 tokens > max_tokens 5" in r.reason


def test_our_methods_meet_their_own_floor():
    scenario = Scenario("s", "axis", "in_domain", max_tokens=5, al_floor=1.5, ours_al_floor=3.0)
    al_2_5 = Counters(drafts=2, draft_tokens=14, accepted_tokens=3)
    assert judge("e", scenario, "m", "f", run([1]), run([1], counters=al_2_5), 7).status == "pass"
    r = judge("e", scenario, "m", "f", run([1]), run([1], counters=al_2_5), 7, ours=True)
    assert r.status == "fail" and "< floor 3.0" in r.reason


class TiedReference:
    """A stand-in target whose logits put tokens 2 and 9 within ``gap`` of each other after
    the prompt [0] and token 1, with 2 on top; every other position is clear-cut."""

    def __init__(self, gap: float) -> None:
        self.gap = gap

    def judge(self, prompt_ids, baseline_ids, speculative_ids):
        def next_logits(ids):
            logits = torch.zeros(16)
            logits[2], logits[9] = 5.0, 5.0 - self.gap
            return logits
        return judge_outputs(prompt_ids, baseline_ids, speculative_ids, next_logits)


def judged(scenario, baseline, speculative, gap):
    return judge("e", scenario, "m", "f", run(baseline), run(speculative), 7,
                 requests=[Request((0,))], reference=lambda: TiedReference(gap))


def test_near_tie_where_speculation_matches_the_reference_passes_even_when_exact():
    r = judged(EXACT, [1, 9, 3], [1, 2, 3], NEAR_TIE_EPSILON / 2)
    assert r.status == "near-tie", r.reason
    assert "speculation matches the reference" in r.divergences[0].verdict


def test_near_tie_where_the_baseline_matches_passes_only_without_controlled_numerics():
    assert judged(LOOSE, [1, 2, 3], [1, 9, 3], NEAR_TIE_EPSILON / 2).status == "near-tie"
    r = judged(EXACT, [1, 2, 3], [1, 9, 3], NEAR_TIE_EPSILON / 2)
    assert r.status == "fail" and "baseline matches the reference" in r.reason


def test_speculation_departing_at_a_clear_gap_is_a_bug():
    r = judged(LOOSE, [1, 2, 3], [1, 9, 3], 3.0)
    assert r.status == "fail" and "BUG: speculation departs" in r.reason
    # the baseline departing there is the engine's own problem, listed but not speculation's
    r = judged(EXACT, [1, 9, 3], [1, 2, 3], 3.0)
    assert r.status == "near-tie" and r.divergences[0].verdict.startswith("the baseline departs")


LOGPROBS = Scenario("s", "axis", "in_domain", max_tokens=5, al_floor=2.0, logprobs=True)


def test_logprobs_within_tolerance_pass():
    base = run([1, 2], top2=[[-0.1, -2.0], [-0.3, -1.5]])
    spec = run([1, 2], top2=[[-0.1, -2.0], [-0.3 + 4e-6, -1.5]])
    r = judge("e", LOGPROBS, "m", "f", base, spec, 7)
    assert r.status == "pass" and abs(r.logprob_deviation - 4e-6) < 1e-9


def test_drafted_tokens_without_logprobs_fail():
    """llama-server before our patch 0008: accepted draft tokens came without probabilities."""
    base = run([1, 2, 3], top2=[[-0.1, -2.0]] * 3)
    spec = run([1, 2, 3], top2=[[-0.1, -2.0]])
    r = judge("e", LOGPROBS, "m", "f", base, spec, 7)
    assert r.status == "fail" and "fewer top-2 log-probs" in r.reason


def test_logprobs_off_by_more_than_the_tolerance_fail():
    base = run([1], top2=[[-0.1, -2.0]])
    spec = run([1], top2=[[-0.1, -2.01]])
    r = judge("e", LOGPROBS, "m", "f", base, spec, 7)
    assert r.status == "fail" and "log-probs differ by 1.00e-02" in r.reason


def test_schema_violations_are_named():
    schema = json.loads(STRUCTURED_SCHEMA)
    assert schema_violation('{"module":"os","line":3}', schema) is None
    assert "not JSON" in schema_violation('{"module":"os",', schema)
    assert "not one of" in schema_violation('{"module":"io","line":3}', schema)
    assert "out of range" in schema_violation('{"module":"os","line":300}', schema)
    assert "not of type integer" in schema_violation('{"module":"os","line":true}', schema)
    assert "misses ['line']" in schema_violation('{"module":"os"}', schema)
    assert "extra keys ['x']" in schema_violation('{"module":"os","line":1,"x":0}', schema)


def test_structured_outputs_that_do_not_parse_fail():
    scenario = Scenario("s", "axis", "in_domain", max_tokens=20, al_floor=2.0,
                        json_schema=STRUCTURED_SCHEMA)
    text = '{"module" : "re"\n   '
    base = Run([Output([], streamed_text=text, streamed_tokens=5)], GOOD, 1.0)
    spec = Run([Output([], streamed_text=text, streamed_tokens=5)], GOOD, 1.0)
    r = judge("e", scenario, "m", "f", base, spec, 7)
    assert r.status == "fail" and "speculation, prompt 0: not JSON" in r.reason


def test_greedy_choices_of_one_request_must_agree():
    """n=2 greedy: a run's outputs are each request's two choices in turn, equal to each other."""
    scenario = Scenario("s", "axis", "in_domain", max_tokens=5, al_floor=2.0, choices=2)
    agreeing = run([1, 2], [1, 2], [3, 4], [3, 4])
    assert judge("e", scenario, "m", "f", agreeing, agreeing, 7).status == "pass"
    split = run([1, 2], [1, 2], [3, 4], [3, 5])
    r = judge("e", scenario, "m", "f", agreeing, split, 7)
    assert r.status == "fail" and "speculation: the greedy choices of requests [1] differ" in r.reason


def test_each_output_is_judged_at_its_own_request():
    scenario = Scenario("s", "axis", "in_domain", max_tokens=5, choices=2)
    assert scenario.per_output(("a", "b")) == ("a", "a", "b", "b")
