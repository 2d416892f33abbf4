"""Plain-torch causal depthwise convolution for LFM2's short-conv layers on CPU.

SGLang 0.5.23 runs every non-CUDA short convolution through Triton kernels
(``sglang.kernels.ops.mamba.causal_conv1d_triton``), and Triton has no CPU driver. These two
functions take the place of those kernels on CPU, with the same arguments and side effects:

- ``causal_conv1d_fn``: prefill over packed variable-length sequences; reads each request's
  conv state (when it has one), writes back the last ``width - 1`` inputs.
- ``causal_conv1d_update``: decode and speculative verify over a ``[batch, dim, seqlen]``
  block; also writes the rollback tape (``intermediate_conv_window[slot, step]`` = the conv
  window after consuming token ``step``), from which SGLang restores the state of the last
  accepted token after verification.

The conv state holds the last ``width - 1`` inputs, oldest first; any memory layout works.
"""

from __future__ import annotations

from typing import List, Optional, Union

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1


def _conv(window: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
          activation: Optional[str]) -> torch.Tensor:
    """[dim, state_len + n] inputs (state first) -> [dim, n] outputs, in float32."""
    out = F.conv1d(window.float().unsqueeze(0), weight.float().unsqueeze(1),
                   None if bias is None else bias.float(), groups=weight.shape[0]).squeeze(0)
    return F.silu(out) if activation in ("silu", "swish") else out


def _activation(activation: Union[bool, str, None]) -> Optional[str]:
    if isinstance(activation, bool):
        return "silu" if activation else None
    return activation


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    conv_states: Optional[torch.Tensor],
    query_start_loc: torch.Tensor,
    seq_lens_cpu: List[int],
    cache_indices: Optional[torch.Tensor] = None,
    has_initial_state: Optional[torch.Tensor] = None,
    activation: Union[bool, str, None] = "silu",
    pad_slot_id: int = PAD_SLOT_ID,
    validate_data: bool = False,
    block_table: Optional[torch.Tensor] = None,
    **kwargs,
) -> torch.Tensor:
    """x: [dim, total_tokens], sequences packed left to right at ``query_start_loc``."""
    if block_table is not None:
        raise NotImplementedError("sglang_dspark short conv: block_table launches are CUDA-graph only")
    activation = _activation(activation)
    dim, width = weight.shape
    state_len = width - 1
    out = torch.empty_like(x)
    starts = query_start_loc.tolist()
    slots = cache_indices.tolist() if cache_indices is not None else range(len(seq_lens_cpu))
    has_state = has_initial_state.tolist() if has_initial_state is not None else None
    for i, (n, slot) in enumerate(zip(seq_lens_cpu, slots)):
        if slot == pad_slot_id or n == 0:
            continue
        start = starts[i]
        if conv_states is not None and has_state is not None and has_state[i]:
            prior = conv_states[slot, :, :state_len].to(x.dtype)
        else:
            prior = x.new_zeros(dim, state_len)
        window = torch.cat((prior, x[:, start:start + n]), dim=1)
        out[:, start:start + n] = _conv(window, weight, bias, activation).to(out.dtype)
        if conv_states is not None:
            conv_states[slot, :, :state_len] = window[:, -state_len:].to(conv_states.dtype)
    return out


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: Union[bool, str, None] = None,
    cache_seqlens: Optional[torch.Tensor] = None,
    conv_state_indices: Optional[torch.Tensor] = None,
    num_accept_tokens: Optional[torch.Tensor] = None,
    intermediate_conv_window: Optional[torch.Tensor] = None,
    intermediate_state_indices: Optional[torch.Tensor] = None,
    retrieve_next_token: Optional[torch.Tensor] = None,
    retrieve_next_sibling: Optional[torch.Tensor] = None,
    retrieve_parent_token: Optional[torch.Tensor] = None,
    pad_slot_id: int = PAD_SLOT_ID,
    metadata=None,
    validate_data: bool = False,
) -> torch.Tensor:
    """x: [batch, dim] (one token) or [batch, dim, seqlen] (a verify block)."""
    unsupported = {"cache_seqlens": cache_seqlens, "num_accept_tokens": num_accept_tokens,
                   "retrieve_next_token": retrieve_next_token}
    given = [name for name, value in unsupported.items() if value is not None]
    if given:
        # Circular-buffer states and EAGLE token trees are not used by LFM2 or DSPARK.
        raise NotImplementedError(f"sglang_dspark short conv on CPU does not implement {given}")
    activation = _activation(activation)
    squeeze = x.dim() == 2
    if squeeze:
        x = x.unsqueeze(-1)
    batch, _, seqlen = x.shape
    state_len = weight.shape[1] - 1
    out = torch.empty_like(x)
    slots = conv_state_indices.tolist() if conv_state_indices is not None else range(batch)
    tape_slots = (intermediate_state_indices.tolist() if intermediate_state_indices is not None
                  else range(batch))
    for b, (slot, tape_slot) in enumerate(zip(slots, tape_slots)):
        if slot == pad_slot_id:
            continue
        window = torch.cat((conv_state[slot, :, :state_len].to(x.dtype), x[b]), dim=1)
        out[b] = _conv(window, weight, bias, activation).to(out.dtype)
        conv_state[slot, :, :state_len] = window[:, -state_len:].to(conv_state.dtype)
        if intermediate_conv_window is not None:
            # After consuming token t the window is inputs t+1 .. t+state_len of `window`.
            steps = window.unfold(1, state_len, 1)[:, 1:seqlen + 1]  # [dim, seqlen, state_len]
            intermediate_conv_window[tape_slot, :seqlen, :, :state_len] = (
                steps.transpose(0, 1).to(intermediate_conv_window.dtype))
    return out.squeeze(-1) if squeeze else out


def scatter_mamba_states_after_mtp_verify(
    mamba_caches,
    state_indices_tensor: torch.Tensor,
    last_correct_step_indices: torch.Tensor,
    mamba_track_indices: Optional[torch.Tensor],
    mamba_steps_to_track: Optional[torch.Tensor],
    src_indices_raw: Optional[torch.Tensor] = None,
) -> None:
    """The rollback after verification: for each request whose last accepted step is
    ``step >= 0``, copy the states recorded at that step (conv windows from the tape, SSM
    states if the model has any) into its persistent slot, and likewise into the radix-cache
    track slots when given."""
    rows = (src_indices_raw if src_indices_raw is not None
            else torch.arange(last_correct_step_indices.shape[0]))

    def scatter(dst: torch.Tensor, tape: torch.Tensor, slots: torch.Tensor,
                steps: torch.Tensor) -> None:
        slots, steps, src = slots.long(), steps.long(), rows.long()
        keep = (steps >= 0) & (slots >= 0) & (slots < dst.shape[1])
        if keep.any():
            dst[:, slots[keep]] = tape[:, src[keep], steps[keep]].to(dst.dtype)

    pairs = [(mamba_caches.temporal, mamba_caches.intermediate_ssm)]
    pairs += list(zip(mamba_caches.conv, mamba_caches.intermediate_conv_window))
    for dst, tape in pairs:
        if dst is None or dst.numel() == 0:
            continue
        scatter(dst, tape, state_indices_tensor, last_correct_step_indices)
        if mamba_track_indices is not None:
            scatter(dst, tape, mamba_track_indices, mamba_steps_to_track)
