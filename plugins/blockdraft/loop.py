"""Reference speculative decoding: a target, a drafter, greedy verification.

The target is re-run over the whole sequence at every step (no KV cache): slow, but it makes
the reference obviously equal to plain greedy decoding, which is what the engines must match.
Statistics follow vLLM's definitions: acceptance length = 1 + accepted / drafts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import torch

from .drafter import Drafter
from .target import HFTarget


@dataclass
class SpecStats:
    drafts: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    # accepted_per_position[i]: drafts whose first i+1 tokens were all accepted
    accepted_per_position: list[int] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0

    def add(self, other: "SpecStats") -> None:
        self.drafts += other.drafts
        self.drafted_tokens += other.drafted_tokens
        self.accepted_tokens += other.accepted_tokens
        width = max(len(self.accepted_per_position), len(other.accepted_per_position))
        self.accepted_per_position = [
            (self.accepted_per_position[i] if i < len(self.accepted_per_position) else 0)
            + (other.accepted_per_position[i] if i < len(other.accepted_per_position) else 0)
            for i in range(width)]


def greedy_generate(target: HFTarget, prompt: list[int], max_new_tokens: int,
                    stop_ids: Collection[int] = ()) -> list[int]:
    seq = list(prompt)
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits, _ = target(torch.tensor([seq]))
        token = int(logits[0, -1].argmax())
        out.append(token)
        seq.append(token)
        if token in stop_ids:
            break
    return out


def speculative_generate(target: HFTarget, drafter: Drafter, prompt: list[int],
                         max_new_tokens: int, num_draft: int,
                         stop_ids: Collection[int] = ()) -> tuple[list[int], SpecStats]:
    """Greedy output of the target, produced by drafting blocks and verifying them."""
    stats = SpecStats(accepted_per_position=[0] * num_draft)
    seq = list(prompt)
    logits, taps = target(torch.tensor([seq]))
    out: list[int] = []
    next_token = int(logits[0, -1].argmax())
    while True:
        out.append(next_token)
        seq.append(next_token)
        if next_token in stop_ids or len(out) >= max_new_tokens:
            return out, stats
        # seq[-1] is the anchor at position p; the target has seen positions 0..p-1
        p = len(seq) - 1
        n = min(num_draft, max_new_tokens - len(out))
        drafts = drafter.propose(target.heads, taps[:, :p], torch.tensor([seq[-1]]), n)[0].tolist()
        logits, taps = target(torch.tensor([seq + drafts]))
        verified = logits[0, p:].argmax(dim=-1).tolist()  # verified[i] follows seq + drafts[:i]
        accepted = 0
        while accepted < n and drafts[accepted] == verified[accepted]:
            accepted += 1
        stats.drafts += 1
        stats.drafted_tokens += n
        stats.accepted_tokens += accepted
        for i in range(accepted):
            stats.accepted_per_position[i] += 1
        for token in drafts[:accepted]:
            out.append(token)
            seq.append(token)
            if token in stop_ids:
                return out, stats
        if len(out) >= max_new_tokens:
            return out, stats
        next_token = verified[accepted]
