"""The plain-torch LFM2 short convolution against a token-by-token reference."""

from __future__ import annotations

import pytest
import torch

from sglang_dspark.short_conv import (PAD_SLOT_ID, causal_conv1d_fn, causal_conv1d_update,
                                      scatter_mamba_states_after_mtp_verify)

DIM = 6


def _reference(inputs: torch.Tensor, weight, bias, state: torch.Tensor, silu: bool):
    """Outputs of one sequence [dim, n] and the window after each token, one token at a time:
    y_t = sum_j w[:, j] * (previous width - 1 inputs, then x_t)[j]."""
    previous = [state[:, j].clone() for j in range(state.shape[1])]
    outputs, windows = [], []
    for t in range(inputs.shape[1]):
        taps = previous + [inputs[:, t]]
        y = sum(weight[:, j] * taps[j] for j in range(weight.shape[1]))
        y = y if bias is None else y + bias
        outputs.append(torch.nn.functional.silu(y) if silu else y)
        previous = taps[1:]
        windows.append(torch.stack(previous, dim=1))
    return torch.stack(outputs, dim=1), windows


def _states(slots: int, width: int, channels_last: bool) -> torch.Tensor:
    """Conv states [slots, dim, width - 1]; channels_last mimics SGLang's AMX layout."""
    state = torch.randn(slots, width - 1, DIM) if channels_last else torch.randn(slots, DIM, width - 1)
    return state.transpose(1, 2) if channels_last else state


@pytest.mark.parametrize("width", [3, 4])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("silu", [False, True])
def test_prefill_matches_reference(width, channels_last, silu):
    torch.manual_seed(0)
    weight, bias = torch.randn(DIM, width), torch.randn(DIM)
    lengths, slots, has_state = [5, 1, 3, 2], [2, 0, PAD_SLOT_ID, 3], [True, False, True, False]
    x = torch.randn(DIM, sum(lengths))
    states = _states(4, width, channels_last)
    before = states.clone()
    starts = torch.tensor([0, 5, 6, 9, 11], dtype=torch.int32)
    out = causal_conv1d_fn(x, weight, bias, states, starts, lengths,
                           cache_indices=torch.tensor(slots, dtype=torch.int32),
                           has_initial_state=torch.tensor(has_state),
                           activation="silu" if silu else None)
    for i, (n, slot) in enumerate(zip(lengths, slots)):
        if slot == PAD_SLOT_ID:
            continue
        prior = before[slot] if has_state[i] else torch.zeros(DIM, width - 1)
        want, windows = _reference(x[:, starts[i]:starts[i] + n], weight, bias, prior, silu)
        torch.testing.assert_close(out[:, starts[i]:starts[i] + n], want)
        torch.testing.assert_close(states[slot], windows[-1])
    assert torch.equal(states[1], before[1])  # no request owns slot 1


def test_verify_block_equals_decode_steps_and_records_the_tape():
    torch.manual_seed(1)
    width, steps = 3, 10
    weight, bias = torch.randn(DIM, width), None
    states = _states(4, width, channels_last=True)
    start = states.clone()
    slots = torch.tensor([3, 1], dtype=torch.int32)
    block = torch.randn(2, DIM, steps)
    tape = torch.zeros(2, steps, DIM, width - 1)
    out = causal_conv1d_update(block, states, weight, bias, conv_state_indices=slots,
                               intermediate_conv_window=tape,
                               intermediate_state_indices=torch.tensor([0, 1], dtype=torch.int32))
    for b, slot in enumerate(slots.tolist()):
        want, windows = _reference(block[b], weight, bias, start[slot], silu=False)
        torch.testing.assert_close(out[b], want)
        for t in range(steps):
            torch.testing.assert_close(tape[b, t], windows[t])
        torch.testing.assert_close(states[slot], windows[-1])

    decoded = start.clone()  # the same tokens decoded one at a time give the same outputs
    for t in range(steps):
        step_out = causal_conv1d_update(block[:, :, t], decoded, weight, bias,
                                        conv_state_indices=slots)
        torch.testing.assert_close(step_out, out[:, :, t])


def test_rollback_restores_the_state_of_the_last_accepted_token():
    torch.manual_seed(2)
    width, steps = 3, 10
    weight = torch.randn(DIM, width)
    conv = torch.randn(1, 4, DIM, width - 1)  # [layers, slots, dim, width - 1]
    start = conv.clone()
    slots = torch.tensor([2, 0, 1])
    block = torch.randn(3, DIM, steps)
    tape = torch.zeros(1, 3, steps, DIM, width - 1)
    causal_conv1d_update(block, conv[0], weight, None, conv_state_indices=slots,
                         intermediate_conv_window=tape[0],
                         intermediate_state_indices=torch.tensor([0, 1, 2]))

    class Caches:
        temporal = torch.empty(0)
        intermediate_ssm = torch.empty(0)

    Caches.conv, Caches.intermediate_conv_window = [conv], [tape]
    accepted = torch.tensor([3, -1, 0])  # request 1 commits nothing: its slot is left alone
    after_verify = conv.clone()
    scatter_mamba_states_after_mtp_verify(Caches, slots, accepted, None, None)
    for r, (slot, step) in enumerate(zip(slots.tolist(), accepted.tolist())):
        if step < 0:
            torch.testing.assert_close(conv[0, slot], after_verify[0, slot])
            continue
        _, windows = _reference(block[r], weight, None, start[0, slot], silu=False)
        torch.testing.assert_close(conv[0, slot], windows[step])
    assert torch.equal(conv[0, 3], start[0, 3])
