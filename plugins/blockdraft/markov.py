"""DSpark's Markov head, confidence head and greedy Markov block decoding, in plain torch.

The backbone gives base logits for every block position in one pass; the Markov head then
re-introduces dependence inside the block: step t adds a low-rank bias computed from the token
drafted at step t-1 (the anchor token for t = 0), ``logits_t = base_t + W2 W1[prev]``. The
confidence head estimates, per drafted token, how likely the target agrees, from the draft
hidden state and the previous token's Markov embedding. Parameter names are the checkpoint's
(``markov_head.*``, ``confidence_head.*``).
"""

from __future__ import annotations

import torch
from torch import nn

from .specs import DSparkHeadSpec


class VanillaMarkovHead(nn.Module):
    def __init__(self, vocab_size: int, rank: int) -> None:
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = nn.Linear(rank, vocab_size, bias=False)

    def bias(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        return self.markov_w2(self.markov_w1(prev_tokens))


class ConfidenceHead(nn.Module):
    def __init__(self, hidden_size: int, rank: int, with_markov: bool) -> None:
        super().__init__()
        self.with_markov = with_markov
        self.proj = nn.Linear(hidden_size + (rank if with_markov else 0), 1)

    def forward(self, hidden: torch.Tensor, prev_embeddings: torch.Tensor | None) -> torch.Tensor:
        """Raw confidence logit per position; sigmoid gives the probability."""
        features = torch.cat([hidden, prev_embeddings], dim=-1) if self.with_markov else hidden
        return self.proj(features).squeeze(-1)


def build_markov_head(spec: DSparkHeadSpec, vocab_size: int) -> VanillaMarkovHead:
    if spec.markov_head_type != "vanilla":
        raise NotImplementedError(f"the reference implements the vanilla Markov head, not "
                                  f"{spec.markov_head_type!r}")
    return VanillaMarkovHead(vocab_size, spec.markov_rank)


def markov_block_decode(markov_head: VanillaMarkovHead, base_logits: torch.Tensor,
                        anchor_tokens: torch.Tensor) -> torch.Tensor:
    """Greedy drafts [B, gamma] from base logits [B, gamma, V], chaining each step's bias on
    the token chosen at the step before, starting from the anchor tokens [B]."""
    prev = anchor_tokens.long()
    drafts = []
    for step in range(base_logits.shape[1]):
        prev = (base_logits[:, step] + markov_head.bias(prev)).argmax(dim=-1)
        drafts.append(prev)
    return torch.stack(drafts, dim=1)
