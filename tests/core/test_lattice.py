"""The LiLiCorr head's lattice layout and the greedy walk (our own logic, plain torch)."""

from __future__ import annotations

import torch

from blockdraft.lattice import LiLiCorrHead, greedy_walk
from blockdraft.specs import LiLiCorrHeadSpec

SPEC = LiLiCorrHeadSpec(candidate_topk=4, hidden_size=32, num_heads=2, mlp_ratio=2.0,
                        factor_dim=8, vector_eps=1e-6, logit_scale=10.0, num_layers=1)


def test_greedy_walk_follows_the_chosen_predecessor():
    k = 3
    t = torch.full((1, 3, k, k), -1.0)
    t[0, 0, :, 2] = 5.0          # start: candidate 2 (every row of slot 0 is the start row)
    t[0, 1, 2, 0] = 4.0          # after candidate 2: candidate 0
    t[0, 1, 1, 1] = 9.0          # a better link from a predecessor that was not chosen
    t[0, 2, 0, 1] = 3.0          # after candidate 0: candidate 1
    assert greedy_walk(t).tolist() == [[2, 0, 1]]


def test_greedy_walk_is_not_viterbi():
    t = torch.zeros(1, 2, 2, 2)
    t[0, 0, :, 0], t[0, 0, :, 1] = 1.0, 0.9   # start prefers 0 ...
    t[0, 1, 1, 0] = 100.0                      # ... though 1 -> 0 would score far higher in total
    assert greedy_walk(t).tolist() == [[0, 0]]


def test_head_output_layout():
    torch.manual_seed(0)
    head = LiLiCorrHead(SPEC, model_hidden_size=16, block_size=8, rms_norm_eps=1e-6).eval()
    b, s, k = 2, 5, SPEC.candidate_topk
    args = (torch.randn(b, s, k, 16), torch.randn(b, s, k).log_softmax(-1), torch.randn(b, s, 16),
            torch.randn(b, 16), torch.tensor([True, False]))
    start, pairs = head.score(*args)
    out = head(*args)
    assert out.shape == (b, s, k, k)
    assert torch.allclose(out[:, 0], (SPEC.logit_scale * start)[:, None, :].expand(-1, k, -1))
    assert torch.allclose(out[:, 1:], SPEC.logit_scale * pairs)
    # normalised vectors: every score is a cosine
    assert out.abs().max() <= SPEC.logit_scale + 1e-4


def test_attention_bias_keeps_trained_offsets_for_short_drafts():
    head = LiLiCorrHead(SPEC, model_hidden_size=16, block_size=8, rms_norm_eps=1e-6)
    with torch.no_grad():
        head.relative_slot_bias.copy_(torch.arange(15.0).expand(2, -1))
        head.same_slot_bias.fill_(100.0)
    bias = head.attention_bias(3)
    k = SPEC.candidate_topk
    assert bias.shape == (2, 3 * k, 3 * k)
    assert bias[0, 0, k].item() == 7 - 1      # slot 0 -> slot 1: offset block_size - 1 = 7
    assert bias[0, k, 0].item() == 7 + 1
    assert bias[0, 1, 0].item() == 7 + 100   # same slot: relative 0 plus the same-slot bonus


def test_invalid_anchor_is_ignored():
    torch.manual_seed(0)
    head = LiLiCorrHead(SPEC, model_hidden_size=16, block_size=8, rms_norm_eps=1e-6).eval()
    args = [torch.randn(1, 4, 4, 16), torch.randn(1, 4, 4).log_softmax(-1), torch.randn(1, 4, 16)]
    no_anchor = torch.tensor([False])
    a = head(*args, torch.randn(1, 16), no_anchor)
    b = head(*args, torch.randn(1, 16), no_anchor)
    assert torch.equal(a, b)
