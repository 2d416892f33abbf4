"""The plain-torch sgl_kernel CPU ops against straightforward references."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sglang_dspark import cpu_ops

H, KV, D = 4, 2, 16  # query heads, KV heads, head dim


def _sdpa(q, k, v, causal_offset=None):
    """Reference attention for one request: q [Tq, H, D], k/v [Tk, KV, D]; causal_offset is the
    position of q's first row among the keys (None = no mask)."""
    k = k.repeat_interleave(H // KV, dim=1)
    v = v.repeat_interleave(H // KV, dim=1)
    mask = None
    if causal_offset is not None:
        mask = torch.arange(k.shape[0])[None, :] <= torch.arange(q.shape[0])[:, None] + causal_offset
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                         attn_mask=mask, scale=D ** -0.5)
    return out.transpose(0, 1)


@pytest.fixture
def pool():
    torch.manual_seed(0)
    k_buffer, v_buffer = torch.randn(64, KV, D), torch.randn(64, KV, D)
    req_to_token = torch.randperm(64)[:48].view(2, 24).to(torch.int32)
    return k_buffer, v_buffer, req_to_token


@pytest.mark.parametrize("causal", [True, False])
def test_extend_attention(pool, causal):
    k_buffer, v_buffer, req_to_token = pool
    seq_lens, ext_lens = torch.tensor([10, 7]), torch.tensor([4, 7])  # request 1 has no prefix
    starts = torch.tensor([0, 4])
    q, k, v = torch.randn(11, H, D), torch.randn(11, KV, D), torch.randn(11, KV, D)
    out = torch.empty_like(q)
    rows = torch.tensor([1, 0])
    cpu_ops.extend_attention_cpu(q, k, v, out, k_buffer, v_buffer, 1.0, 1.0, req_to_token, rows,
                                 seq_lens, ext_lens, starts, 7, D ** -0.5, 0.0, False, 0, None,
                                 None, None, causal)
    for i in range(2):
        prefix = int(seq_lens[i] - ext_lens[i])
        locs = req_to_token[rows[i], :prefix].long()
        s, e = int(starts[i]), int(starts[i] + ext_lens[i])
        keys = torch.cat((k_buffer[locs], k[s:e]))
        values = torch.cat((v_buffer[locs], v[s:e]))
        want = _sdpa(q[s:e], keys, values, prefix if causal else None)
        torch.testing.assert_close(out[s:e], want)


def test_decode_attention_writes_the_new_token_and_attends(pool):
    k_buffer, v_buffer, req_to_token = pool
    seq_lens, rows = torch.tensor([9, 3]), torch.tensor([0, 1])
    q, k, v = torch.randn(2, H, D), torch.randn(2, KV, D), torch.randn(2, KV, D)
    loc = torch.stack([req_to_token[0, 8], req_to_token[1, 2]]).long()
    out = torch.empty_like(q)
    cpu_ops.decode_attention_cpu(q, k_buffer, v_buffer, 1.0, 1.0, out, k, v, loc,
                                 torch.empty(0), req_to_token, rows, seq_lens, D ** -0.5, 0.0,
                                 False, 0, None, None)
    torch.testing.assert_close(k_buffer[loc], k)
    for i in range(2):
        locs = req_to_token[rows[i], :seq_lens[i]].long()
        torch.testing.assert_close(out[i:i + 1], _sdpa(q[i:i + 1], k_buffer[locs], v_buffer[locs]))


def test_norms():
    torch.manual_seed(1)
    x, residual, weight = torch.randn(5, 32), torch.randn(5, 32), torch.randn(32)
    want = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * weight
    torch.testing.assert_close(cpu_ops.rmsnorm_cpu(x, weight, 1e-6), want)
    total = x + residual
    cpu_ops.fused_add_rmsnorm_cpu(x, residual, weight, 1e-6)
    torch.testing.assert_close(residual, total)
    torch.testing.assert_close(x, total / total.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * weight)


@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_embedding(is_neox):
    torch.manual_seed(2)
    rot = 8  # partial rotary: the last D - rot dims pass through
    positions = torch.tensor([0, 3, 7])
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    freqs = torch.outer(torch.arange(16).float(), inv)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    q, k = torch.randn(3, H * D), torch.randn(3, KV * D)
    got_q, got_k = cpu_ops.rotary_embedding_cpu(positions, q, k, D, cache, is_neox)

    def rotate(x, heads):
        x = x.view(3, heads, D).clone()
        cos, sin = freqs[positions].cos()[:, None], freqs[positions].sin()[:, None]
        if is_neox:
            a, b = x[..., :rot // 2].clone(), x[..., rot // 2:rot].clone()
            x[..., :rot // 2], x[..., rot // 2:rot] = a * cos - b * sin, b * cos + a * sin
        else:
            a, b = x[..., 0:rot:2].clone(), x[..., 1:rot:2].clone()
            x[..., 0:rot:2], x[..., 1:rot:2] = a * cos - b * sin, b * cos + a * sin
        return x.view(3, heads * D)

    torch.testing.assert_close(got_q, rotate(q, H))
    torch.testing.assert_close(got_k, rotate(k, KV))


def test_request_bookkeeping_round_trip():
    req_to_token = torch.zeros(3, 16, dtype=torch.int32)
    rows, start, end = torch.tensor([2, 0]), torch.tensor([3, 0]), torch.tensor([6, 2])
    slots = torch.tensor([11, 12, 13, 21, 22])
    cpu_ops.assign_req_to_token_pool_cpu(rows, req_to_token, start, end, slots, 16)
    assert req_to_token[2, 3:6].tolist() == [11, 12, 13] and req_to_token[0, :2].tolist() == [21, 22]
    out = torch.zeros(5, dtype=torch.int64)
    cpu_ops.assign_extend_cache_locs_cpu(rows, req_to_token, start, end, out, 16)
    assert out.tolist() == slots.tolist()
    drafts = torch.zeros(4, dtype=torch.int64)
    cpu_ops.assign_draft_cache_locs_contiguous_cpu(rows, req_to_token, torch.tensor([3, 0]), drafts,
                                                   16, 1, 2)
    assert drafts.tolist() == [11, 12, 21, 22]


def test_accept_bookkeeping():
    accept_tokens = torch.tensor([[5, 6, 7, 0], [8, 0, 0, 0]])
    bonus = torch.zeros(2, dtype=torch.int64)
    cpu_ops.fill_bonus_tokens_cpu(accept_tokens, torch.tensor([3, 1]), bonus, 4)
    assert bonus.tolist() == [7, 8]
    accepted = torch.zeros(3, dtype=torch.int64)
    cpu_ops.fill_accept_out_cache_loc_cpu(torch.tensor([0, -1, 2, 3]), torch.tensor([40, 41, 42, 43]),
                                          accepted)
    assert accepted.tolist() == [40, 42, 43]


def test_copy_all_layer_kv_cache_moves_rows_in_every_layer():
    layers = [torch.arange(40, dtype=torch.float32).view(10, 4) + 100 * i for i in range(2)]
    before = [t.clone() for t in layers]
    ptrs = torch.tensor([t.data_ptr() for t in layers])
    strides = torch.tensor([t.stride(0) * t.element_size() for t in layers])
    cpu_ops.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([7, 8]), torch.tensor([1, 2]))
    for t, b in zip(layers, before):
        assert torch.equal(t[7:9], b[1:3]) and torch.equal(t[:7], b[:7]) and torch.equal(t[9], b[9])


def test_packed_varlen_attention():
    torch.manual_seed(3)
    q, k, v = torch.randn(7, H, D), torch.randn(7, H, D), torch.randn(7, H, D)
    bounds = torch.tensor([0, 3, 7], dtype=torch.int32)
    out = cpu_ops.flash_attn_varlen_func(q, k, v, bounds, bounds, 4, 4, None, False)
    for s, e in ((0, 3), (3, 7)):
        want = F.scaled_dot_product_attention(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1),
                                              v[s:e].transpose(0, 1)).transpose(0, 1)
        torch.testing.assert_close(out[s:e], want)


def test_placeholders_raise_a_clear_error():
    with pytest.raises(NotImplementedError, match="install an sgl_kernel built for CPU"):
        cpu_ops.not_provided("verify_tree_greedy_cpu")()
