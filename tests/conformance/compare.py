"""What one conformance case measured, and its verdict (pure logic, unit-tested)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .scenarios import NEAR_TIE_EPSILON, Scenario


@dataclass
class Output:
    """One request's result as an engine returned it."""

    token_ids: list[int]
    # top-2 log-probs per generated position (baseline runs only): [[lp1, lp2], ...]
    top2_logprobs: list[list[float]] | None = None
    finish_reason: str = ""
    # streamed requests (OpenAI server-sent events) carry text, not ids: the text as it
    # arrived, compared instead of the ids, and the completion tokens the server counted
    streamed_text: str | None = None
    streamed_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.streamed_tokens if self.streamed_text is not None else len(self.token_ids)


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


@dataclass
class Divergence:
    prompt: int
    position: int      # token index, or character index where the request was streamed
    gap: float | None  # the target's top1-top2 log-prob gap there (None: not reported)
    streamed: bool = False


def first_divergence(baseline: Output, spec: Output) -> int | None:
    """The first differing token, or character for streamed outputs (None: identical)."""
    if baseline.streamed_text is not None or spec.streamed_text is not None:
        a, b = baseline.streamed_text or "", spec.streamed_text or ""
    else:
        a, b = baseline.token_ids, spec.token_ids
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


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
    divergences: list[Divergence] = field(default_factory=list)
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_length: float = 0.0
    seconds: float = 0.0
    baseline_seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def judge(engine: str, scenario: Scenario, method: str, family: str, baseline: Run, spec: Run,
          max_draft: int, ours: bool = False) -> CaseResult:
    """Compare a speculative run with the baseline and check speculation really ran (and, for
    ``ours``, reached the scenario's floor for our methods)."""
    c = spec.counters
    floor = max(scenario.al_floor, scenario.ours_al_floor if ours else 0.0)
    result = CaseResult(engine, scenario.name, method, family, "pass", drafts=c.drafts,
                        draft_tokens=c.draft_tokens, accepted_tokens=c.accepted_tokens,
                        acceptance_length=round(c.acceptance_length, 3),
                        seconds=round(spec.seconds, 3), baseline_seconds=round(baseline.seconds, 3))
    problems = []
    if c.drafts <= 0 or c.accepted_tokens <= 0:
        problems.append(f"speculation did not run or accepted nothing ({c.drafts} drafts, "
                        f"{c.accepted_tokens} accepted)")
    elif not 1.0 <= c.acceptance_length <= max_draft + 1:
        problems.append(f"acceptance length {c.acceptance_length:.2f} outside 1..{max_draft + 1}")
    elif scenario.compares_outputs and c.acceptance_length < floor:
        problems.append(f"acceptance length {c.acceptance_length:.2f} < floor {floor}")
    for i, output in enumerate(spec.outputs):
        if output.num_tokens > scenario.max_tokens:
            problems.append(f"prompt {i}: {output.num_tokens} tokens > max_tokens {scenario.max_tokens}")
    if scenario.compares_outputs:
        equal = 0
        for i, (base, out) in enumerate(zip(baseline.outputs, spec.outputs)):
            position = first_divergence(base, out)
            if position is None:
                equal += 1
            else:
                streamed = out.streamed_text is not None
                result.divergences.append(Divergence(
                    i, position, None if streamed else gap_at(base, position), streamed))
        result.equal = f"{equal}/{len(spec.outputs)}"
        for d in result.divergences:
            near_tie = d.gap is not None and d.gap < NEAR_TIE_EPSILON
            if scenario.exact or not near_tie:
                if d.streamed:
                    problems.append(f"prompt {d.prompt} (streamed) diverges at character {d.position}")
                    continue
                gap = "unknown" if d.gap is None else f"{d.gap:.4f}"
                problems.append(f"prompt {d.prompt} diverges at token {d.position} (gap {gap})")
        if not problems and result.divergences:
            result.status = "near-tie"
    elif len(spec.outputs) != len(baseline.outputs) or any(not o.num_tokens for o in spec.outputs):
        problems.append("not every request finished")
    if problems:
        result.status, result.reason = "fail", "; ".join(problems)
    return result
