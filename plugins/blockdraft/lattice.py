"""LiLiCorr's candidate-lattice head and the greedy walk over its scores, in plain torch.

One DFlash block pass gives K slots; the top-k candidates of every slot form a K x k lattice.
The head embeds each candidate (its token, the slot's draft hidden state, features of its
log-prob and rank, slot and rank embeddings), mixes all K*k candidates with lattice attention
that carries a learned per-head slot-distance bias, conditions them on the anchor (the target
state of the last accepted token) and emits an outgoing and an incoming unit vector per
candidate. The score of moving from candidate i of slot s to candidate j of slot s+1 is the
dot product of their vectors; the anchor's own outgoing vector scores slot 0. A greedy
left-to-right walk then picks the drafted path. Parameter names are the checkpoint's
(``lilicorr.*`` without the prefix), so a state dict loads as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .specs import LiLiCorrHeadSpec

NUM_CANDIDATE_FEATURES = 5  # log p, p, log p - max log p, rank / (k-1), rank == 0


class UngatedMLP(nn.Module):
    """up -> silu -> down, both with bias (the head's MLP shape)."""

    def __init__(self, dim_in: int, dim_hidden: int, dim_out: int) -> None:
        super().__init__()
        self.up_proj = nn.Linear(dim_in, dim_hidden)
        self.down_proj = nn.Linear(dim_hidden, dim_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.up_proj(x)))


class LatticeAttention(nn.Module):
    """Full attention over the flattened lattice with an additive per-head bias."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * hidden_size))
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        nn.init.xavier_uniform_(self.in_proj_weight)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        bsz, length, hidden = x.shape
        q, k, v = F.linear(x, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        heads = [t.view(bsz, length, self.num_heads, -1).transpose(1, 2) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*heads, attn_mask=bias)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, length, hidden))


class LatticeLayer(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float, eps: float) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(hidden_size, eps=eps)
        self.attn = LatticeAttention(hidden_size, num_heads)
        self.mlp_norm = nn.RMSNorm(hidden_size, eps=eps)
        self.mlp = UngatedMLP(hidden_size, int(hidden_size * mlp_ratio), hidden_size)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), bias)
        return x + self.mlp(self.mlp_norm(x))


class LiLiCorrHead(nn.Module):
    """Scores the K x k candidate lattice of one block (see the module docstring)."""

    def __init__(self, spec: LiLiCorrHeadSpec, *, model_hidden_size: int, block_size: int,
                 rms_norm_eps: float) -> None:
        super().__init__()
        hidden = spec.hidden_size
        self.spec = spec
        self.block_size = block_size
        self.num_slots = block_size - 1
        self.topk = spec.candidate_topk
        self.token_proj = (nn.Identity() if hidden == model_hidden_size
                           else nn.Linear(model_hidden_size, hidden))
        self.pass_hidden_proj = nn.Linear(model_hidden_size, hidden)
        self.feature_norm = nn.LayerNorm(NUM_CANDIDATE_FEATURES)
        self.feature_mlp = UngatedMLP(NUM_CANDIDATE_FEATURES, hidden, hidden)
        self.slot_embedding = nn.Parameter(torch.zeros(1, 1, self.num_slots, 1, hidden))
        self.rank_embedding = nn.Parameter(torch.zeros(1, 1, 1, self.topk, hidden))
        self.relative_slot_bias = nn.Parameter(torch.zeros(spec.num_heads, 2 * block_size - 1))
        self.same_slot_bias = nn.Parameter(torch.zeros(spec.num_heads))
        self.context_proj = nn.Linear(model_hidden_size, hidden)
        self.layers = nn.ModuleList(
            LatticeLayer(hidden, spec.num_heads, spec.mlp_ratio, rms_norm_eps)
            for _ in range(spec.num_layers))
        self.output_norm = nn.RMSNorm(hidden, eps=rms_norm_eps)
        self.anchor_norm = nn.RMSNorm(hidden, eps=rms_norm_eps)
        self.factor_input_proj = nn.Linear(3 * hidden, hidden)
        self.out_head = nn.Linear(hidden, spec.factor_dim)
        self.in_head = nn.Linear(hidden, spec.factor_dim)
        self.anchor_out_head = nn.Linear(hidden, spec.factor_dim)

    def attention_bias(self, num_slots: int) -> torch.Tensor:
        """[heads, S*k, S*k]: relative-slot bias plus a same-slot bonus, with the trained
        offset (block_size - 1) kept when fewer slots are drafted."""
        slot = torch.arange(num_slots, device=self.same_slot_bias.device).repeat_interleave(self.topk)
        rel = slot[:, None] - slot[None, :]
        same = (rel == 0).to(self.same_slot_bias.dtype)
        return (self.relative_slot_bias[:, rel + self.block_size - 1]
                + same[None] * self.same_slot_bias[:, None, None])

    def candidate_features(self, log_probs: torch.Tensor) -> torch.Tensor:
        topk = log_probs.shape[-1]
        rank = torch.arange(topk, device=log_probs.device, dtype=log_probs.dtype)
        rank_frac = rank / (topk - 1) if topk > 1 else torch.zeros_like(rank)
        return torch.stack([
            log_probs,
            log_probs.exp(),
            log_probs - log_probs.max(dim=-1, keepdim=True).values,
            rank_frac.expand_as(log_probs),
            (rank == 0).to(log_probs.dtype).expand_as(log_probs),
        ], dim=-1)

    def score(self, token_embeddings: torch.Tensor, candidate_log_probs: torch.Tensor,
              pass_hidden: torch.Tensor, anchor_hidden: torch.Tensor,
              anchor_valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unscaled start scores [B, k] and pair scores [B, S-1, k, k].

        token_embeddings [B, S, k, H]: the target's input embeddings of the candidates;
        candidate_log_probs [B, S, k]: their full-vocabulary log-probs at each slot;
        pass_hidden [B, S, H]: the draft hidden state of each slot (after the final norm);
        anchor_hidden [B, H]: hidden_norm(fc(target taps of the last accepted token));
        anchor_valid [B]: False where a request has no anchor yet.
        """
        bsz, num_slots, topk = candidate_log_probs.shape
        if not 1 <= num_slots <= self.num_slots or topk != self.topk:
            raise ValueError(f"lattice of {num_slots}x{topk} candidates does not fit a head "
                             f"trained for up to {self.num_slots}x{self.topk}")
        hidden = self.token_proj(token_embeddings) + self.pass_hidden_proj(pass_hidden).unsqueeze(-2)
        features = self.candidate_features(candidate_log_probs.float()).to(hidden.dtype)
        hidden = hidden + self.feature_mlp(self.feature_norm(features))
        hidden = hidden + self.slot_embedding[:, 0, :num_slots] + self.rank_embedding[:, 0]
        hidden = hidden.reshape(bsz, num_slots * topk, -1)
        bias = self.attention_bias(num_slots).to(hidden.dtype)[None]
        for layer in self.layers:
            hidden = layer(hidden, bias)
        hidden = self.output_norm(hidden).reshape(bsz, num_slots, topk, -1)
        anchor = self.context_proj(anchor_hidden) * anchor_valid[:, None].to(hidden.dtype)
        anchor = self.anchor_norm(anchor)
        anchor_row = anchor[:, None, None, :]
        factor = F.silu(self.factor_input_proj(
            torch.cat([hidden, anchor_row.expand_as(hidden), hidden * anchor_row], dim=-1)))
        eps = self.spec.vector_eps
        out_vec = F.normalize(self.out_head(factor), dim=-1, eps=eps)
        in_vec = F.normalize(self.in_head(factor), dim=-1, eps=eps)
        anchor_out = F.normalize(self.anchor_out_head(anchor), dim=-1, eps=eps)
        start = (anchor_out[:, None, :] * in_vec[:, 0]).sum(dim=-1)
        pairs = out_vec[:, :-1] @ in_vec[:, 1:].transpose(-1, -2)
        return start, pairs

    def forward(self, token_embeddings: torch.Tensor, candidate_log_probs: torch.Tensor,
                pass_hidden: torch.Tensor, anchor_hidden: torch.Tensor,
                anchor_valid: torch.Tensor) -> torch.Tensor:
        """Transition logits [B, S, k, k]: row i of slot s scores slot s's candidates after
        candidate i of slot s-1; slot 0 repeats the start scores in every row."""
        start, pairs = self.score(token_embeddings, candidate_log_probs, pass_hidden,
                                  anchor_hidden, anchor_valid)
        scale = self.spec.logit_scale
        first = (scale * start.float())[:, None, None, :].expand(-1, 1, self.topk, -1)
        return torch.cat([first, scale * pairs.float()], dim=1)


def sample_walk(transition_logits: torch.Tensor,
                temperature: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate index per slot [B, S] and the distribution each index was drawn from [B, S, k].

    Left to right, each slot's candidate is drawn from softmax(row of the candidate chosen at
    the slot before / temperature), row 0 at slot 0; a request at temperature 0 takes the
    argmax and its proposal is one-hot. Rejection sampling stays lossless only if it divides by
    exactly these proposals.
    """
    bsz, num_slots, topk, _ = transition_logits.shape
    rows = torch.arange(bsz, device=transition_logits.device)
    greedy = temperature <= 0
    scale = torch.where(greedy, torch.ones_like(temperature), temperature).float()[:, None]
    previous = torch.zeros(bsz, dtype=torch.long, device=transition_logits.device)
    chosen, proposals = [], []
    for slot in range(num_slots):
        logits = transition_logits[rows, slot, previous].float()
        proposal = (logits / scale).softmax(dim=-1)
        # argmax(p / Exp(1)) is a draw from p (the exponential race vLLM's sampler uses)
        drawn = (proposal / torch.empty_like(proposal).exponential_()).argmax(dim=-1)
        previous = torch.where(greedy, logits.argmax(dim=-1), drawn)
        one_hot = F.one_hot(previous, topk).to(proposal.dtype)
        proposals.append(torch.where(greedy[:, None], one_hot, proposal))
        chosen.append(previous)
    return torch.stack(chosen, dim=1), torch.stack(proposals, dim=1)


def greedy_walk(transition_logits: torch.Tensor) -> torch.Tensor:
    """Candidate index per slot [B, S]: start at row 0, then at each slot take the best
    successor of the candidate chosen at the slot before (a greedy walk, not Viterbi).
    sample_walk at temperature 0 picks the same path; this one runs on every greedy draft
    step, so it does only the two ops per slot a greedy path needs."""
    bsz, num_slots = transition_logits.shape[:2]
    rows = torch.arange(bsz, device=transition_logits.device)
    previous = torch.zeros(bsz, dtype=torch.long, device=transition_logits.device)
    chosen = []
    for slot in range(num_slots):
        previous = transition_logits[rows, slot, previous].argmax(dim=-1)
        chosen.append(previous)
    return torch.stack(chosen, dim=1)
