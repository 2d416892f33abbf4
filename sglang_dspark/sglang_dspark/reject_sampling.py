"""Plain-torch chain rejection sampling for sampled (temperature > 0) DSPARK verifies on CPU.

SGLang 0.5.23 verifies a sampled DSPARK block with
``sglang.kernels.ops.speculative.reject_sampling.chain_speculative_sampling_triton`` even when
its tensors are on CPU (``dspark_accept._accept_sampling_core``), and Triton has no CPU driver.
:func:`chain_speculative_sampling` computes what that kernel (``speculative_sampling_classic_kernel``)
computes, from the same arguments and into the same buffers, consuming the same uniform samples:

- ``accept_index[b, 0]`` = ``retrive_index[b, 0]``; for each accepted draft ``k`` (1-based)
  ``accept_index[b, k]`` = ``retrive_index[b, k]``; other entries are left as they are.
- ``predicts[retrive_index[b, k - 1]]`` = the accepted draft ``candidates[b, k]``, and
  ``predicts`` at the last accepted slot = the final (correction or bonus) token; other entries
  are left as they are.
- ``accept_token_num[b]`` = the number of accepted drafts.

Classic rule (the default): draft ``k`` (token ``x``, coin ``u = uniform_samples[b, k - 1]``)
is accepted iff ``0 < q(x) <= 1`` and ``u * q(x) < p(x)``, with ``p``/``q`` row ``k - 1`` of
``target_probs``/``draft_probs``; the scan stops at the first rejection. Block verification
(``block_verification=True``, Algorithm 2 of arXiv:2403.10444) scans from the longest prefix
down, as the kernel does. The final token is drawn with ``uniform_samples_for_final_sampling``
by inverse CDF: from the target row after the last draft when every draft was accepted,
otherwise from the residual ``max(s * p - q, 0)`` (``s`` = 1, or the block-verification prefix
weight) of the row after the last accepted token. Like the kernel, ``threshold_single``,
``threshold_acc``, ``deterministic`` and the tree links are not used (DSPARK passes 1.0, 1.0).

The arithmetic is float32 in the kernel's order and granularity (per-4096-element CDF tiles,
per-tile partial sums), so for the same inputs the results match the kernel
(``tests/sglang/test_reject_sampling.py`` runs it under the Triton interpreter).
"""

from __future__ import annotations

import torch

# The kernel's CDF tile (BLOCK_V) and its cap on the block-verification reduction tile.
BLOCK_V = 4096
MAX_BLOCK_REDUCE = 32768

_F32 = torch.float32


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def _tile_sum(values: torch.Tensor, tile: int) -> torch.Tensor:
    """A float32 scalar accumulated tile by tile, like ``acc += tl.sum(tile)``."""
    acc = torch.zeros((), dtype=_F32)
    for start in range(0, values.numel(), tile):
        acc = acc + values[start : start + tile].sum()
    return acc


def _final_token(p: torch.Tensor, q: torch.Tensor | None, residual_scale: torch.Tensor,
                 norm_sum: torch.Tensor | None, coin: torch.Tensor) -> int:
    """Inverse-CDF draw from ``p`` (q None: every draft accepted) or from the residual."""
    vocab = p.numel()
    if q is None:
        values = p
    else:
        # Any non-probability q (NaN, +-inf, negative) counts as 0, as in the kernel.
        q = torch.where((q >= 0.0) & (q <= 1.0), q, torch.zeros((), dtype=_F32))
        diff = residual_scale * p - q
        values = torch.where(diff > 0.0, diff, torch.zeros((), dtype=_F32))
    if norm_sum is None:
        norm_sum = _tile_sum(values, BLOCK_V)
    target_u = coin * norm_sum
    cum_sum = torch.zeros((), dtype=_F32)
    for start in range(0, vocab, BLOCK_V):
        tile = values[start : start + BLOCK_V]
        hits = torch.nonzero((cum_sum + torch.cumsum(tile, 0)) > target_u)
        if hits.numel():
            return start + int(hits[0, 0])
        cum_sum = cum_sum + tile.sum()
    # A degenerate residual (all zero) or rounding past the total: the kernel's fallback.
    return vocab - 1


def _block_verify(cand: list[int], tp: torch.Tensor, dp: torch.Tensor, coins: torch.Tensor,
                  num_slots: int) -> tuple[int, torch.Tensor, torch.Tensor | None]:
    """(accepted drafts, residual scale, residual mass or None) by Algorithm 2."""
    one = torch.ones((), dtype=_F32)
    zero = torch.zeros((), dtype=_F32)
    prefix_prob = one
    prefix_probs = []
    for step in range(1, num_slots):
        p, q = tp[step - 1, cand[step]], dp[step - 1, cand[step]]
        q_is_prob = bool((q > 0.0) & (q <= 1.0))
        prefix_prob = torch.minimum(prefix_prob * p / q, one) if q_is_prob else zero
        prefix_probs.append(prefix_prob)
    block_reduce = min(_next_power_of_2(tp.shape[-1]), MAX_BLOCK_REDUCE)
    for step in range(num_slots - 1, 0, -1):
        prefix_prob, coin = prefix_probs[step - 1], coins[step - 1]
        if not bool(coin < prefix_prob):
            continue
        accept_prob = prefix_prob
        residual_mass = None
        if step < num_slots - 1 and bool(prefix_prob > 0.0) and bool(prefix_prob < 1.0):
            residual = torch.clamp_min(prefix_prob * tp[step] - dp[step], 0.0)
            residual_mass = _tile_sum(residual, block_reduce)
            accept_prob = residual_mass / (residual_mass + 1.0 - prefix_prob)
        if bool(coin < accept_prob):
            return step, prefix_prob, residual_mass
    return 0, one, None


@torch.no_grad()
def chain_speculative_sampling(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor | None,
    retrive_next_sibling: torch.Tensor | None,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float,
    threshold_acc: float,
    deterministic: bool,
    *,
    block_verification: bool = False,
) -> None:
    """In-place, same signature as ``chain_speculative_sampling_triton``.

    candidates [bs, slots] (slot 0 = the anchor), retrive_index [bs, slots] (flat ``predicts``
    positions), uniform_samples [bs, >= slots - 1], uniform_samples_for_final_sampling [bs],
    target_probs [bs, slots, vocab], draft_probs [bs, slots - 1, vocab]."""
    batch_size, num_slots = candidates.shape
    cand_rows = candidates.tolist()
    index_rows = retrive_index.tolist()
    coins_final = uniform_samples_for_final_sampling.to(_F32)
    for b in range(batch_size):
        cand, index = cand_rows[b], index_rows[b]
        tp, dp = target_probs[b].to(_F32), draft_probs[b].to(_F32)
        coins = uniform_samples[b].to(_F32)
        accept_index[b, 0] = index[0]
        residual_scale = torch.ones((), dtype=_F32)
        norm_sum = None
        if block_verification:
            num_accept, residual_scale, norm_sum = _block_verify(cand, tp, dp, coins, num_slots)
        else:
            num_accept = 0
            for step in range(1, num_slots):
                p, q = tp[step - 1, cand[step]], dp[step - 1, cand[step]]
                if not bool((q > 0.0) & (q <= 1.0) & (coins[step - 1] * q < p)):
                    break
                num_accept = step
        last = index[0]
        for step in range(1, num_accept + 1):
            predicts[last] = cand[step]
            last = index[step]
            accept_index[b, step] = last
        accept_token_num[b] = num_accept
        row = num_accept  # the target row after the last accepted token
        all_accepted = num_accept == num_slots - 1
        predicts[last] = _final_token(tp[row], None if all_accepted else dp[row], residual_scale,
                                      norm_sum, coins_final[b])


def chain_speculative_sampling_any_device(*args, **kwargs) -> None:
    """What ``dspark_accept`` calls on the CPU engine: the torch version for CPU tensors, the
    Triton kernel otherwise."""
    target_probs = kwargs.get("target_probs", args[9] if len(args) > 9 else None)
    if target_probs is not None and target_probs.device.type != "cpu":
        from sglang.kernels.ops.speculative.reject_sampling import chain_speculative_sampling_triton

        return chain_speculative_sampling_triton(*args, **kwargs)
    return chain_speculative_sampling(*args, **kwargs)
