"""A DFlash, LiLiCorr or DSpark drafter: the backbone plus its kind's heads, and its block pass.

The module's state dict is the checkpoint's (``layers.*``, ``fc``, ``hidden_norm``, ``norm``,
``lilicorr.*``, ``markov_head.*``, ``confidence_head.*``); the target lends its input
embeddings and LM head, as in every engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from .backbone import DFlashBackbone, single_block_mask
from .lattice import LiLiCorrHead, greedy_walk
from .markov import ConfidenceHead, build_markov_head, markov_block_decode
from .specs import DrafterSpec, read_drafter_spec


@dataclass
class TargetHeads:
    """What a drafter borrows from its target."""

    embed_tokens: nn.Embedding
    lm_head_weight: torch.Tensor  # [V, H]


class Drafter(DFlashBackbone):
    def __init__(self, spec: DrafterSpec, *, target_hidden_size: int, rope_theta: float) -> None:
        super().__init__(spec.backbone, target_hidden_size=target_hidden_size, rope_theta=rope_theta)
        self.drafter_spec = spec
        b = spec.backbone
        if spec.lilicorr is not None:
            self.lilicorr = LiLiCorrHead(spec.lilicorr, model_hidden_size=b.hidden_size,
                                         block_size=b.block_size, rms_norm_eps=b.rms_norm_eps)
        if spec.dspark is not None:
            self.markov_head = build_markov_head(spec.dspark, b.vocab_size)
            if spec.dspark.confidence_head:
                self.confidence_head = ConfidenceHead(b.hidden_size, spec.dspark.markov_rank,
                                                      spec.dspark.confidence_head_with_markov)

    @property
    def samples_from_anchor(self) -> bool:
        """True when block position 0 (the anchor) predicts the next token (DSpark's layout);
        otherwise the anchor only conditions and positions 1.. predict."""
        dspark = self.drafter_spec.dspark
        return dspark is not None and dspark.sample_from_anchor

    def block_hidden(self, heads: TargetHeads, taps: torch.Tensor, anchor_tokens: torch.Tensor,
                     num_draft: int) -> torch.Tensor:
        """Hidden states [B, num_draft, H] of the block positions that predict the drafts.

        taps [B, p, n*H] are the target's tap states at positions 0..p-1; anchor_tokens [B]
        is the token at position p (the last verified token, not yet seen by the target)."""
        bsz, p, _ = taps.shape
        mask_id = self.spec.mask_token_id
        block_len = num_draft if self.samples_from_anchor else num_draft + 1
        ids = torch.full((bsz, block_len), mask_id, dtype=torch.long, device=taps.device)
        ids[:, 0] = anchor_tokens
        positions = torch.arange(p, p + block_len, device=taps.device).expand(bsz, -1)
        context_positions = torch.arange(p, device=taps.device).expand(bsz, -1)
        hidden = self(heads.embed_tokens(ids), positions, taps, context_positions,
                      single_block_mask(p, block_len, taps.device).expand(bsz, -1, -1))
        return hidden if self.samples_from_anchor else hidden[:, 1:]

    @torch.no_grad()
    def propose(self, heads: TargetHeads, taps: torch.Tensor, anchor_tokens: torch.Tensor,
                num_draft: int) -> torch.Tensor:
        """Greedy drafts [B, num_draft] for the tokens after the anchor."""
        hidden = self.block_hidden(heads, taps, anchor_tokens, num_draft)
        logits = F.linear(hidden, heads.lm_head_weight)
        spec = self.drafter_spec
        if spec.lilicorr is not None:
            log_probs = logits.float().log_softmax(dim=-1)
            cand_log_probs, cand_ids = log_probs.topk(spec.lilicorr.candidate_topk, dim=-1)
            anchor = self.anchor_state(taps[:, -1])
            valid = torch.ones(taps.shape[0], dtype=torch.bool, device=taps.device)
            transitions = self.lilicorr(heads.embed_tokens(cand_ids), cand_log_probs, hidden,
                                        anchor, valid)
            chosen = greedy_walk(transitions)
            return cand_ids.gather(-1, chosen[..., None]).squeeze(-1)
        if spec.dspark is not None:
            return markov_block_decode(self.markov_head, logits, anchor_tokens)
        return logits.argmax(dim=-1)


def rope_theta_of(config: dict) -> float:
    params = config.get("rope_parameters") or {}
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def load_drafter(path: str | Path, *, target_hidden_size: int) -> Drafter:
    """A drafter checkpoint folder as a float32 module."""
    path = Path(path)
    spec = read_drafter_spec(path)
    config = json.loads((path / "config.json").read_text())
    drafter = Drafter(spec, target_hidden_size=target_hidden_size, rope_theta=rope_theta_of(config))
    state = {}
    for file in sorted(path.glob("*.safetensors")):
        state.update(load_file(file))
    state = {k: v.float() for k, v in state.items()
             if k not in ("embed_tokens.weight", "lm_head.weight")}
    drafter.load_state_dict(state, strict=True)
    return drafter.eval()
