"""The DFlash block-drafting backbone in plain torch, with the checkpoint's parameter names.

The target's hidden states at a few tap layers are concatenated and projected by ``fc``; in
every draft layer that context becomes keys and values (after ``hidden_norm``), the same way
vLLM, SGLang and llama.cpp inject it into the draft KV cache. The draft then runs one
non-causal pass over a block of query tokens (the anchor token followed by mask tokens), each
block attending to the context before it and to all of its own tokens. Embeddings and the
LM head belong to the target and are passed in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .specs import BackboneSpec


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """NeoX-style rotary embedding of x [B, heads, T, D] at positions [B, T]."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = positions.to(torch.float32)[..., None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)[:, None]
    return (x * angles.cos().to(x.dtype) + rotate_half(x) * angles.sin().to(x.dtype))


class DraftAttention(nn.Module):
    def __init__(self, spec: BackboneSpec, rope_theta: float) -> None:
        super().__init__()
        h, d = spec.hidden_size, spec.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = (spec.num_attention_heads,
                                                            spec.num_key_value_heads, d)
        self.rope_theta = rope_theta
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)
        self.q_norm = nn.RMSNorm(d, eps=spec.rms_norm_eps)
        self.k_norm = nn.RMSNorm(d, eps=spec.rms_norm_eps)

    def _heads(self, x: torch.Tensor, proj: nn.Linear, n: int) -> torch.Tensor:
        return proj(x).view(*x.shape[:2], n, self.head_dim).transpose(1, 2)

    def context_kv(self, context: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of the (hidden_norm-ed) context, as engines write them into the cache."""
        k = apply_rope(self.k_norm(self._heads(context, self.k_proj, self.num_kv_heads)),
                       positions, self.rope_theta)
        return k, self._heads(context, self.v_proj, self.num_kv_heads)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, context_k: torch.Tensor,
                context_v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = apply_rope(self.q_norm(self._heads(x, self.q_proj, self.num_heads)), positions,
                       self.rope_theta)
        k = apply_rope(self.k_norm(self._heads(x, self.k_proj, self.num_kv_heads)), positions,
                       self.rope_theta)
        v = self._heads(x, self.v_proj, self.num_kv_heads)
        k = torch.cat([context_k, k], dim=2)
        v = torch.cat([context_v, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None],
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(*x.shape[:2], -1))


class DraftMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, spec: BackboneSpec, rope_theta: float) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.self_attn = DraftAttention(spec, rope_theta)
        self.post_attention_layernorm = nn.RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.mlp = DraftMLP(spec.hidden_size, spec.intermediate_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, context: torch.Tensor,
                context_positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        context_k, context_v = self.self_attn.context_kv(context, context_positions)
        x = x + self.self_attn(self.input_layernorm(x), positions, context_k, context_v, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashBackbone(nn.Module):
    def __init__(self, spec: BackboneSpec, *, target_hidden_size: int, rope_theta: float) -> None:
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleList(DraftLayer(spec, rope_theta) for _ in range(spec.num_hidden_layers))
        self.fc = nn.Linear(len(spec.target_layer_ids) * target_hidden_size, spec.hidden_size,
                            bias=False)
        self.hidden_norm = nn.RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.norm = nn.RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)

    def forward(self, block_embeds: torch.Tensor, positions: torch.Tensor, taps: torch.Tensor,
                context_positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden states of the block tokens [B, Tb, H].

        block_embeds [B, Tb, H] at positions [B, Tb]; taps [B, Tc, n*H] are the target's
        concatenated tap states at context_positions [B, Tc]; mask [B, Tb, Tc+Tb] (True =
        attend) says which context and block entries each block token sees."""
        context = self.hidden_norm(self.fc(taps))
        x = block_embeds
        for layer in self.layers:
            x = layer(x, positions, context, context_positions, mask)
        return self.norm(x)

    def anchor_state(self, taps: torch.Tensor) -> torch.Tensor:
        """hidden_norm(fc(taps)) of the last accepted token: LiLiCorr's anchor input."""
        return self.hidden_norm(self.fc(taps))


def single_block_mask(num_context: int, block_len: int, device: torch.device | None = None) -> torch.Tensor:
    """[1, block_len, num_context + block_len]: one block sees all context and itself."""
    return torch.ones(1, block_len, num_context + block_len, dtype=torch.bool, device=device)
