"""Cost-aware drafted length: each step drafts only as many tokens as their verification pays for.

For the ``d`` sequences drafting together, drafting ``k`` tokens each is worth

    d (1 + S_1 + ... + S_k) / (T_draft + T_verify(d (k + 1)))

tokens per second, where ``S_i`` is the running share of drafts reaching position ``i`` that were
accepted up to it (acceptance is a prefix, so drafting fewer tokens does not change it),
``T_draft`` the running draft time and ``T_verify(n)`` the engine's time for a step of ``n``
target tokens. The same rule as llama.cpp's ``--spec-draft-cost-aware`` (llamacpp_patches/0011),
for engines that keep the draft running every step (vLLM's block drafter writes the target's
context into its KV cache in the draft pass, so ``k = 0`` still drafts and then verifies none).

An engine that cannot time its target forwards at start-up learns ``T_verify`` from its own
steps: the first steps cycle through every length, and every 8th later one drafts 2 more than
the choice.
Engine-free: adapters report times and acceptance and ask for a length.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable


class StepCostCurve:
    """T_verify(n) as a line ``a + b n`` fitted by least squares through the median of the
    recent times of steps at each measured size ``n``. A line rather than the medians joined up:
    on a CPU neighbouring sizes differ by less than their noise, and the choice follows the
    slope, which a line takes from every size at once. The slope is never negative and the
    line never starts below 0 (then it is fitted through the origin)."""

    def __init__(self, window: int = 9) -> None:
        self._samples: dict[int, deque[float]] = {}
        self._window = window
        self._line: tuple[float, float] | None = None  # (a, b), from the samples, on first use

    def record(self, num_tokens: int, seconds: float) -> None:
        self._samples.setdefault(num_tokens, deque(maxlen=self._window)).append(seconds)
        self._line = None

    def points(self) -> list[tuple[int, float]]:
        """(size, median seconds) of every measured size, smallest first."""
        return [(n, statistics.median(self._samples[n])) for n in sorted(self._samples)]

    def line(self) -> tuple[float, float]:
        """(a, b) of T_verify(n) = a + b n."""
        if self._line is None:
            points = self.points()
            if not points:
                raise ValueError("no step measured yet")
            sizes, times = zip(*points)
            mean_n, mean_t = statistics.fmean(sizes), statistics.fmean(times)
            spread = sum((n - mean_n) ** 2 for n in sizes)
            slope = max(0.0, sum((n - mean_n) * (t - mean_t) for n, t in points) / spread
                        if spread else 0.0)
            self._line = (mean_t - slope * mean_n, slope)
            if self._line[0] < 0:
                self._line = (0.0, sum(n * t for n, t in points) / sum(n * n for n in sizes))
        return self._line

    def seconds(self, num_tokens: int) -> float:
        a, b = self.line()
        return a + b * num_tokens


class CostAwareDraftLength:
    """Chooses each step's drafted length in 0..max_length (see the module docstring)."""

    EXPLORE_EVERY = 8  # after warm-up, every 8th step drafts 2 more than the choice

    def __init__(self, max_length: int, warmup_cycles: int = 2) -> None:
        self.max_length = max_length
        self.curve = StepCostCurve()
        self._drafted_per_position = [0] * max_length  # [i]: drafts that reached position i+1
        self._accepted_per_position = [0] * max_length  # ... and were accepted up to it
        self._draft_seconds = deque(maxlen=32)
        self._warmup = [k for _ in range(warmup_cycles) for k in range(max_length, -1, -1)]
        self._steps = 0
        self.chosen = max_length  # the last length chosen by the rule, not by exploring

    @property
    def warmed_up(self) -> bool:
        return self._steps >= len(self._warmup)

    def record_draft(self, seconds: float) -> None:
        self._draft_seconds.append(seconds)

    def record_step(self, num_tokens: int, seconds: float) -> None:
        """A step that ran the target over ``num_tokens`` tokens (decode and verify only)."""
        self.curve.record(num_tokens, seconds)

    def record_acceptance(self, drafted: Iterable[int], accepted: Iterable[int]) -> None:
        """Per sequence of the last verification: tokens drafted, and accepted of them."""
        for num_drafted, num_accepted in zip(drafted, accepted):
            for i in range(min(num_drafted, self.max_length)):
                self._drafted_per_position[i] += 1
                self._accepted_per_position[i] += i < num_accepted

    def expected_tokens(self) -> list[float]:
        """[k]: expected tokens per sequence and step when drafting k (the target's own, plus the
        accepted ones); one pseudo-draft, half accepted, keeps an unmeasured position off 0 and 1."""
        expected = [1.0]
        for drafted, accepted in zip(self._drafted_per_position, self._accepted_per_position):
            expected.append(expected[-1] + (accepted + 0.5) / (drafted + 1.0))
        return expected

    def choose(self, num_sequences: int) -> int:
        step = self._steps
        self._steps += 1
        if step < len(self._warmup) or not self._draft_seconds:
            return self._warmup[step % len(self._warmup)]
        if step % self.EXPLORE_EVERY == 0 and self.chosen < self.max_length:
            # the positions past the choice keep being measured (as llama.cpp's rule does);
            # exploring below it would only cost accepted tokens: acceptance is a prefix
            return min(self.max_length, self.chosen + 2)
        draft = statistics.median(self._draft_seconds)
        rates = [num_sequences * expected
                 / (draft + self.curve.seconds(num_sequences * (k + 1)))
                 for k, expected in enumerate(self.expected_tokens())]
        self.chosen = max(range(len(rates)), key=rates.__getitem__)
        return self.chosen
