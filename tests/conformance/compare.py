"""What one conformance case measured, and its verdict (pure logic, unit-tested)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from blockdraft.verdict import NEAR_TIE_EPSILON, FloatReference, first_difference

from .client import Cut
from .prompts import Request, text_ids, tokenizer
from .scenarios import LOGPROB_TOLERANCE, Scenario

# what vllm_lilicorr and llama-server (patch 0011) log once they choose drafted lengths
COST_AWARE_LOG = "cost-aware drafting, "


@dataclass
class Output:
    """One request's result as an engine returned it."""

    token_ids: list[int]
    # top-2 log-probs per generated position (baseline runs, and speculative ones of a
    # scenario that asks for them): [[lp1, lp2], ...]
    top2_logprobs: list[list[float]] | None = None
    finish_reason: str = ""
    # streamed requests (OpenAI server-sent events) carry text, not ids: the text as it
    # arrived, compared instead of the ids, and the completion tokens the server counted
    streamed_text: str | None = None
    streamed_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.streamed_tokens if self.streamed_text is not None else len(self.token_ids)

    @property
    def text(self) -> str:
        return self.streamed_text if self.streamed_text is not None else tokenizer().decode(self.token_ids)


@dataclass
class Counters:
    """The engine's own speculative counters over one scenario."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 0.0

    def __add__(self, other: "Counters") -> "Counters":
        return Counters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                        self.accepted_tokens + other.accepted_tokens)

    def __sub__(self, other: "Counters") -> "Counters":
        return Counters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                        self.accepted_tokens - other.accepted_tokens)


@dataclass
class Run:
    """All outputs of one scenario under one method."""

    outputs: list[Output]
    counters: Counters
    seconds: float
    peak_mb: float = 0.0  # the engine's resident memory at its highest during the run
    cuts: list[Cut] = field(default_factory=list)  # streams whose clients left before the run
    # the engine logged that it chooses each step's drafted length (cost-aware methods)
    chose_lengths: bool = False

    @property
    def tokens_per_second(self) -> float:
        return sum(o.num_tokens for o in self.outputs) / self.seconds if self.seconds else 0.0


@dataclass
class Divergence:
    prompt: int
    position: int      # first differing token (of the re-tokenised texts where streamed)
    gap: float | None  # top1-top2 logit gap there: the float32 reference's, else the engine's
    # the reference's verdict (blockdraft.verdict); "" where there is none (image prompts)
    verdict: str = ""
    speculation_matches: bool = False  # speculation chose the reference's token
    streamed: bool = False

    def fails(self, exact: bool) -> bool:
        """A bug; with numerics controlled (exact), also any departure of speculation from the
        reference, near-tie or not. Without a reference: any divergence where exact, else one
        the engine's own gap does not show to be a near-tie."""
        if self.verdict:
            return self.verdict.startswith("BUG") or (exact and not self.speculation_matches)
        return exact or self.gap is None or self.gap >= NEAR_TIE_EPSILON

    def describe(self) -> str:
        if self.verdict:
            return f"prompt {self.prompt}: {self.verdict}"
        unit = "character" if self.streamed else "token"
        gap = "unknown" if self.gap is None else f"{self.gap:.4f}"
        return (f"prompt {self.prompt} diverges at {unit} {self.position} "
                f"(engine gap {gap}, no reference)")


def first_divergence(baseline: Output, spec: Output) -> int | None:
    """The first differing token, or character for streamed outputs (None: identical)."""
    if baseline.streamed_text is not None or spec.streamed_text is not None:
        return first_difference(baseline.streamed_text or "", spec.streamed_text or "")
    return first_difference(baseline.token_ids, spec.token_ids)


def divergence(index: int, request: Request | None, baseline: Output, spec: Output,
               reference: Callable[[], FloatReference] | None) -> Divergence | None:
    """Where and why the outputs of one prompt differ, judged against the float32 reference
    where the prompt is text (an image prompt's pixels reach each engine its own way)."""
    position = first_divergence(baseline, spec)
    if position is None:
        return None
    streamed = spec.streamed_text is not None or baseline.streamed_text is not None
    if reference is None or request is None or request.image is not None:
        return Divergence(index, position, None if streamed else gap_at(baseline, position),
                          streamed=streamed)
    if streamed:  # streams carry text: the shared prefix is re-tokenised
        base_ids, spec_ids = text_ids(baseline.streamed_text or ""), text_ids(spec.streamed_text or "")
    else:
        base_ids, spec_ids = baseline.token_ids, spec.token_ids
    verdict = reference().judge(request.prompt_ids, base_ids, spec_ids)
    if verdict.kind == "identical":
        return Divergence(index, position, None, "BUG: the texts differ, their tokens do not",
                          streamed=streamed)
    return Divergence(index, verdict.position, verdict.gap, str(verdict),
                      verdict.matches == "speculation", streamed)


def gap_at(output: Output, position: int) -> float | None:
    if not output.top2_logprobs or position >= len(output.top2_logprobs):
        return None
    top = output.top2_logprobs[position]
    return top[0] - top[1] if len(top) > 1 else None


@dataclass
class CaseResult:
    engine: str
    scenario: str
    method: str
    family: str
    status: str            # pass | near-tie | fail | not available
    reason: str = ""
    equal: str = ""        # "k/n" prompts whose outputs are identical
    outputs: int = 0       # outputs of the speculative run (a request's choices count apart)
    divergences: list[Divergence] = field(default_factory=list)
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_length: float = 0.0
    seconds: float = 0.0
    baseline_seconds: float = 0.0
    tokens_per_second: float = 0.0
    baseline_tokens_per_second: float = 0.0
    peak_mb: float = 0.0
    baseline_peak_mb: float = 0.0
    # scenarios asking for log-probs: the largest |speculative - baseline| top-2 log-prob
    logprob_deviation: float | None = None
    # scenarios whose clients leave mid-step: how many did, and when (medians, ms)
    streams_cut: int = 0
    cut_after_ms: float = 0.0
    cut_step_ms: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def logprob_deviation(baseline: Output, spec: Output) -> float | None:
    """The largest difference of the two runs' top-2 log-probs over the positions where both
    generated the same tokens (None: the speculative run returned fewer of them)."""
    same = first_difference(baseline.token_ids, spec.token_ids)
    positions = len(baseline.token_ids) if same is None else same
    base, ours = baseline.top2_logprobs or [], spec.top2_logprobs or []
    if len(base) < positions or len(ours) < positions or any(
            len(ours[i]) != len(base[i]) for i in range(positions)):
        return None
    return max((abs(a - b) for i in range(positions) for a, b in zip(base[i], ours[i])), default=0.0)


def schema_violation(text: str, schema: dict) -> str | None:
    """Why ``text`` is not a JSON value of ``schema`` (the subset the suite's schemas use:
    objects with required and closed properties, enums, bounded integers, booleans), or None."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not JSON ({exc}): {text!r}"

    def check(value, schema: dict, where: str) -> str | None:
        kind = schema.get("type")
        types = {"object": dict, "string": str, "boolean": bool, "integer": int}
        if kind in types and (not isinstance(value, types[kind])
                              or (kind == "integer" and isinstance(value, bool))):
            return f"{where} is not of type {kind}: {value!r}"
        if "enum" in schema and value not in schema["enum"]:
            return f"{where} = {value!r} is not one of {schema['enum']}"
        if kind == "integer" and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
            return f"{where} = {value} is out of range"
        if kind == "object":
            properties = schema.get("properties", {})
            missing = [k for k in schema.get("required", []) if k not in value]
            extra = [k for k in value if k not in properties]
            if missing or (extra and schema.get("additionalProperties") is False):
                return f"{where} misses {missing} or has extra keys {extra}"
            for key, item in value.items():
                if key in properties and (problem := check(item, properties[key], f"{where}.{key}")):
                    return problem
        return None

    return check(value, schema, "$")


def judge(engine: str, scenario: Scenario, method: str, family: str, baseline: Run, spec: Run,
          max_draft: int, ours: bool = False, requests: Sequence[Request] = (),
          reference: Callable[[], FloatReference] | None = None,
          cost_aware: bool = False) -> CaseResult:
    """Compare a speculative run with the baseline and check speculation really ran (and, for
    ``ours``, reached the scenario's floor for our methods; ``cost_aware``, that the engine
    logged its choosing of the lengths: where a verify window costs no more than a step, every
    step rightly drafts the whole block). Differing outputs are judged
    against ``reference`` (the family's float32 target, loaded on first use) at the prompts
    ``requests``; without them, by the baseline engine's own top1-top2 gap."""
    c = spec.counters
    floor = max(scenario.al_floor, scenario.ours_al_floor if ours else 0.0)
    result = CaseResult(engine, scenario.name, method, family, "pass", drafts=c.drafts,
                        draft_tokens=c.draft_tokens, accepted_tokens=c.accepted_tokens,
                        acceptance_length=round(c.acceptance_length, 3),
                        seconds=round(spec.seconds, 3), baseline_seconds=round(baseline.seconds, 3),
                        tokens_per_second=round(spec.tokens_per_second, 1),
                        baseline_tokens_per_second=round(baseline.tokens_per_second, 1),
                        peak_mb=spec.peak_mb, baseline_peak_mb=baseline.peak_mb,
                        outputs=len(spec.outputs))
    if spec.cuts:
        result.streams_cut = len(spec.cuts)
        result.cut_after_ms = round(statistics.median(c.after_ms for c in spec.cuts), 1)
        result.cut_step_ms = round(statistics.median(c.step_ms for c in spec.cuts), 1)
    problems = []
    if c.drafts <= 0 or c.accepted_tokens <= 0:
        problems.append(f"speculation did not run or accepted nothing ({c.drafts} drafts, "
                        f"{c.accepted_tokens} accepted)")
    elif not 1.0 <= c.acceptance_length <= max_draft + 1:
        problems.append(f"acceptance length {c.acceptance_length:.2f} outside 1..{max_draft + 1}")
    elif scenario.compares_outputs and c.acceptance_length < floor:
        problems.append(f"acceptance length {c.acceptance_length:.2f} < floor {floor}")
    elif cost_aware and not spec.chose_lengths:
        problems.append(f"cost-aware, but the engine never logged its step costs "
                        f"('{COST_AWARE_LOG}'): the option did not reach the engine")
    for i, output in enumerate(spec.outputs):
        # a stream cut by a shutdown is counted by re-tokenising its text, which can split it
        # into more tokens than were generated
        if output.num_tokens > scenario.max_tokens and not scenario.shutdown:
            problems.append(f"prompt {i}: {output.num_tokens} tokens > max_tokens {scenario.max_tokens}")
    if scenario.compares_outputs and scenario.choices > 1:
        # greedy choices of one request are one answer: else the run did not return each
        # request's choices together (or a child sequence decoded differently from its parent)
        for name, run in (("no speculation", baseline), ("speculation", spec)):
            outputs = [o.token_ids for o in run.outputs]
            split = [i // scenario.choices for i in range(0, len(outputs), scenario.choices)
                     if len({tuple(o) for o in outputs[i:i + scenario.choices]}) > 1]
            if split:
                problems.append(f"{name}: the greedy choices of requests {split} differ")
    if scenario.compares_outputs:
        for i, (base, out) in enumerate(zip(baseline.outputs, spec.outputs)):
            d = divergence(i, requests[i] if i < len(requests) else None, base, out, reference)
            if d is not None:
                result.divergences.append(d)
        result.equal = f"{len(spec.outputs) - len(result.divergences)}/{len(spec.outputs)}"
        problems += [d.describe() for d in result.divergences if d.fails(scenario.exact)]
        if not problems and result.divergences:
            result.status = "near-tie"
    elif len(spec.outputs) != len(baseline.outputs) or any(not o.num_tokens for o in spec.outputs):
        problems.append("not every request finished")
    if scenario.logprobs:
        deviations = [logprob_deviation(b, o) for b, o in zip(baseline.outputs, spec.outputs)]
        missing = [i for i, d in enumerate(deviations) if d is None]
        if missing:
            problems.append(f"prompts {missing}: speculation returned fewer top-2 log-probs than "
                            f"tokens (drafted tokens without the target's log-probs)")
        else:
            result.logprob_deviation = max(deviations, default=0.0)
            if result.logprob_deviation > LOGPROB_TOLERANCE:
                problems.append(f"log-probs differ by {result.logprob_deviation:.2e} > "
                                f"{LOGPROB_TOLERANCE} from no speculation")
    if scenario.json_schema:
        schema = json.loads(scenario.json_schema)
        for name, run in (("no speculation", baseline), ("speculation", spec)):
            for i, output in enumerate(run.outputs):
                if problem := schema_violation(output.text, schema):
                    problems.append(f"{name}, prompt {i}: {problem}")
    if problems:
        result.status, result.reason = "fail", "; ".join(problems)
    return result
