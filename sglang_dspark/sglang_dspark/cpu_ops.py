"""Plain-torch versions of the ``sgl_kernel`` CPU ops that SGLang's CPU engine calls.

SGLang 0.5.23 runs on CPU only with ``sgl_kernel`` built for CPU (AMX/AVX-512 C++ ops), which no
package registry ships. These are reference implementations of the ops a dense model and DSPARK
need, registered under the same ``torch.ops.sgl_kernel`` names and semantics (each one follows
the Triton/CUDA kernel SGLang calls on other devices). They are slow and exist so that the CPU
path can be tested; :mod:`sglang_dspark.cpu` loads them only when SGLang runs on CPU and no
``sgl_kernel`` with CPU ops is installed.

``convert_weight_packed`` is the identity: with it defined, SGLang takes its ``intel_amx`` path
(the only CPU attention backend with TARGET_VERIFY support) and every "packed" weight is just the
plain weight that ``weight_packed_linear`` multiplies.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch
import torch.nn.functional as F
from torch.library import custom_op

# Names SGLang modules look up when they are imported (``from sgl_kernel import ...`` or
# ``torch.ops.sgl_kernel.<name>`` at module level) but that DSPARK on CPU never calls: EAGLE token
# trees, Qwen-VL's 3-D patch embedding, the GDN linear-attention ops (the ``sgl_kernel.mamba``
# submodule of the stand-in has the rest). Each gets a placeholder that raises when called.
NOT_PROVIDED = ("build_tree_kernel_efficient_cpu", "verify_tree_greedy_cpu", "conv3d_embed_cpu",
                "fused_gdn_gating_cpu", "fused_sigmoid_gating_delta_rule_update_cpu")


def not_provided(name: str):
    def op(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} has no plain-torch version in sglang_dspark; "
                                  "install an sgl_kernel built for CPU to use this feature")

    op.__name__ = name
    return op


def install_placeholders(module) -> None:
    for name in NOT_PROVIDED:
        placeholder = not_provided(name)
        setattr(module, name, placeholder)
        if not hasattr(torch.ops.sgl_kernel, name):
            # torch.ops namespaces are modules: a plain attribute answers the lookup.
            setattr(torch.ops.sgl_kernel, name, placeholder)


# --- weights, norms, activations -----------------------------------------------------------------


@custom_op("sgl_kernel::convert_weight_packed", mutates_args=())
def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
    return weight.clone()


@custom_op("sgl_kernel::weight_packed_linear", mutates_args=())
def weight_packed_linear(
    mat1: torch.Tensor, mat2: torch.Tensor, bias: Optional[torch.Tensor], is_vnni: bool
) -> torch.Tensor:
    out = F.linear(mat1, mat2.to(mat1.dtype))
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


@custom_op("sgl_kernel::rmsnorm_cpu", mutates_args=())
def rmsnorm_cpu(input: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _rms(input, weight, eps)


@custom_op("sgl_kernel::fused_add_rmsnorm_cpu", mutates_args=("input", "residual"))
def fused_add_rmsnorm_cpu(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    # In place, like the CUDA op: residual <- input + residual; input <- rmsnorm(residual).
    total = (input.float() + residual.float()).to(residual.dtype)
    residual.copy_(total)
    input.copy_(_rms(total, weight, eps))


@custom_op("sgl_kernel::silu_and_mul_cpu", mutates_args=())
def silu_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    gate, up = input.chunk(2, dim=-1)
    return F.silu(gate) * up


@custom_op("sgl_kernel::gelu_and_mul_cpu", mutates_args=())
def gelu_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    gate, up = input.chunk(2, dim=-1)
    return F.gelu(gate) * up


@custom_op("sgl_kernel::gelu_tanh_and_mul_cpu", mutates_args=())
def gelu_tanh_and_mul_cpu(input: torch.Tensor) -> torch.Tensor:
    gate, up = input.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


# --- rotary embedding ------------------------------------------------------------------------------


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    # x: [T, heads, rot_dim]; cos/sin: [T, 1, rot_dim // 2]
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


@custom_op("sgl_kernel::rotary_embedding_cpu", mutates_args=())
def rotary_embedding_cpu(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    cos_sin = cos_sin_cache.index_select(0, positions.flatten().long())
    cos, sin = cos_sin.float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rot = cos_sin_cache.shape[-1]

    def apply(x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(positions.numel(), -1, head_size)
        out = x.clone()
        out[..., :rot] = _rope(x[..., :rot].float(), cos, sin, is_neox).to(x.dtype)
        return out.reshape(shape)

    return apply(query), apply(key)


@custom_op("sgl_kernel::apply_rotary_pos_emb_cpu", mutates_args=())
def apply_rotary_pos_emb_cpu(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    # Hugging Face's rotate-half form; cos/sin cover the full head dimension.
    cos, sin = cos.unsqueeze(unsqueeze_dim).float(), sin.unsqueeze(unsqueeze_dim).float()

    def apply(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)
        return (x.float() * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)

    return apply(q), apply(k)


# --- KV cache and request bookkeeping --------------------------------------------------------------


@custom_op("sgl_kernel::store_cache_cpu", mutates_args=("k_cache", "v_cache"))
def store_cache_cpu(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    indices: torch.Tensor,
    row_dim: int,
) -> None:
    idx = indices.long()
    k_cache.view(k_cache.shape[0], -1)[idx] = k.reshape(idx.numel(), -1).to(k_cache.dtype)
    v_cache.view(v_cache.shape[0], -1)[idx] = v.reshape(idx.numel(), -1).to(v_cache.dtype)


def _ranges_to_pool(req_to_token, rows, starts, ends, values) -> None:
    offset = 0
    for row, start, end in zip(rows.tolist(), starts.tolist(), ends.tolist()):
        n = end - start
        req_to_token[row, start:end] = values[offset : offset + n].to(req_to_token.dtype)
        offset += n


@custom_op("sgl_kernel::assign_req_to_token_pool_cpu", mutates_args=("req_to_token",))
def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    # Request i's new slots out_cache_loc[sum of earlier lengths:] go to its row [start, end).
    _ranges_to_pool(req_to_token, req_pool_indices, start_offset, end_offset, out_cache_loc)


@custom_op("sgl_kernel::assign_extend_cache_locs_cpu", mutates_args=("out_cache_loc",))
def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    # The reverse: gather each request's row [start, end) into out_cache_loc, packed.
    parts = [
        req_to_token[row, start:end]
        for row, start, end in zip(
            req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()
        )
    ]
    if parts:
        packed = torch.cat(parts)
        out_cache_loc[: packed.numel()] = packed.to(out_cache_loc.dtype)


@custom_op(
    "sgl_kernel::assign_draft_cache_locs_contiguous_cpu", mutates_args=("out_cache_loc",)
)
def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_cols: int,
) -> None:
    n = topk * num_cols
    for i, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * n : (i + 1) * n] = req_to_token[row, start : start + n].to(
            out_cache_loc.dtype
        )


@custom_op("sgl_kernel::fill_bonus_tokens_cpu", mutates_args=("bonus_tokens",))
def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    # accept_lens counts the bonus token, which sits at the last accepted slot of each row.
    bs = accept_lens.numel()
    idx = torch.arange(bs) * accept_stride + accept_lens.long() - 1
    bonus_tokens[:bs] = accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype)


@custom_op("sgl_kernel::fill_accept_out_cache_loc_cpu", mutates_args=("accept_out_cache_loc",))
def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    src = accept_index.reshape(-1)
    src = src[src > -1].long()
    accept_out_cache_loc[: src.numel()] = out_cache_loc[src].to(accept_out_cache_loc.dtype)


@custom_op("sgl_kernel::copy_all_layer_kv_cache_cpu", mutates_args=())
def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    # Move KV rows src -> tgt in every layer buffer; buffers come as raw addresses with their
    # row size in bytes (the layout the Triton kernel takes).
    if tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.long(), src_loc.long()
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for address, row_bytes in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * row_bytes)).from_address(address)
        buffer = torch.frombuffer(raw, dtype=torch.uint8).view(rows, row_bytes)
        buffer[tgt] = buffer[src].clone()


# --- attention -------------------------------------------------------------------------------------


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    sm_scale: float,
    logit_cap: float,
    sinks: Optional[torch.Tensor],
) -> torch.Tensor:
    # q: [Tq, Hq, D]; k/v: [Tk, Hkv, D]; mask: [Tq, Tk] bool (True = visible) or None.
    q, k, v = q.float().transpose(0, 1), k.float().transpose(0, 1), v.float().transpose(0, 1)
    if logit_cap <= 0 and sinks is None:
        # torch's fused CPU attention: a few ops instead of a dozen per layer and request, which
        # on the verify path cost more than the arithmetic (0.7 -> 0.27 ms per layer for 10
        # rows over 300 keys, one thread)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm_scale,
                                             enable_gqa=True)
        return out.transpose(0, 1)
    group = q.shape[0] // k.shape[0]
    k = k.repeat_interleave(group, dim=0)
    v = v.repeat_interleave(group, dim=0)
    scores = torch.einsum("hqd,hkd->hqk", q, k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(0), float("-inf"))
    if sinks is not None:
        sink = sinks.float().view(-1, 1, 1).expand(-1, scores.shape[1], 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,hkd->qhd", probs, v)


def _rows(buffer: torch.Tensor, locs: torch.Tensor, scale: float) -> torch.Tensor:
    """Rows ``locs`` of a KV buffer in float32, scaled (index_select: several times faster on
    CPU than advanced indexing)."""
    rows = torch.index_select(buffer, 0, locs).float()
    return rows * scale if scale != 1.0 else rows


def _window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool, window: int) -> Optional[torch.Tensor]:
    mask = None
    if causal:
        mask = k_pos.view(1, -1) <= q_pos.view(-1, 1)
    if window > 0:
        inside = k_pos.view(1, -1) > q_pos.view(-1, 1) - window
        mask = inside if mask is None else mask & inside
    return mask


@custom_op("sgl_kernel::extend_attention_cpu", mutates_args=("o_extend",))
def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: Optional[torch.Tensor],
    v_extend: Optional[torch.Tensor],
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window: int,
    encoder_lens: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor],
    tree_mask: Optional[torch.Tensor],
    is_causal: bool,
) -> None:
    if is_cross_attention:
        raise NotImplementedError("sglang_dspark CPU ops: cross-attention is not implemented")
    # sliding_window arrives as SGLang's window size + 1 (0 = no window).
    window = sliding_window - 1 if sliding_window > 0 else 0
    mask_offset = 0
    for i, (row, seq_len, ext_len, start) in enumerate(
        zip(req_pool_indices.tolist(), seq_lens.tolist(), extend_seq_lens.tolist(), extend_start_loc.tolist())
    ):
        prefix = seq_len - ext_len
        locs = req_to_token[row, :seq_len].long()
        if k_extend is not None and v_extend is not None:
            k = torch.cat((_rows(k_buffer, locs[:prefix], key_scale),
                           k_extend[start : start + ext_len].float()))
            v = torch.cat((_rows(v_buffer, locs[:prefix], value_scale),
                           v_extend[start : start + ext_len].float()))
        else:
            k = _rows(k_buffer, locs, key_scale)
            v = _rows(v_buffer, locs, value_scale)
        q_pos = torch.arange(prefix, seq_len)
        mask = _window_mask(q_pos, torch.arange(seq_len), is_causal, window)
        if tree_mask is not None:
            # Flattened [ext_len, seq_len] rows per request: who may see whom.
            n = ext_len * seq_len
            rows = tree_mask.reshape(-1)[mask_offset : mask_offset + n].view(ext_len, seq_len).bool()
            mask_offset += n
            mask = rows if mask is None else mask & rows
        out = _attend(q_extend[start : start + ext_len], k, v, mask, sm_scale, logit_cap, sinks)
        o_extend[start : start + ext_len] = out.to(o_extend.dtype)


@custom_op("sgl_kernel::decode_attention_cpu", mutates_args=("output", "k_buffer", "v_buffer"))
def decode_attention_cpu(
    query: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,
    key: Optional[torch.Tensor],
    value: Optional[torch.Tensor],
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window: int,
    encoder_lens: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor],
) -> None:
    if is_cross_attention:
        raise NotImplementedError("sglang_dspark CPU ops: cross-attention is not implemented")
    if key is not None and value is not None:
        # The kernel writes this step's K/V into the cache itself.
        idx = loc.long()
        k_buffer[idx] = key.view(idx.numel(), *k_buffer.shape[1:]).to(k_buffer.dtype)
        v_buffer[idx] = value.view(idx.numel(), *v_buffer.shape[1:]).to(v_buffer.dtype)
    window = sliding_window - 1 if sliding_window > 0 else 0
    for i, (row, seq_len) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        locs = req_to_token[row, :seq_len].long()
        mask = _window_mask(torch.tensor([seq_len - 1]), torch.arange(seq_len), False, window)
        out = _attend(
            query[i : i + 1],
            _rows(k_buffer, locs, key_scale),
            _rows(v_buffer, locs, value_scale),
            mask,
            sm_scale,
            logit_cap,
            sinks,
        )
        output[i : i + 1] = out.to(output.dtype)


@custom_op("sgl_kernel::flash_attn_varlen_func", mutates_args=())
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
) -> torch.Tensor:
    # Packed sequences (vision encoders): q/k/v [total, heads, head_dim].
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for (q0, q1), (k0, k1) in zip(zip(bounds_q, bounds_q[1:]), zip(bounds_k, bounds_k[1:])):
        mask = None
        if causal:  # bottom-right aligned, as flash-attention does
            mask = _window_mask(torch.arange(q1 - q0) + (k1 - k0) - (q1 - q0),
                                torch.arange(k1 - k0), True, 0)
        out[q0:q1] = _attend(q[q0:q1], k[k0:k1], v[k0:k1], mask, scale, 0.0, None).to(q.dtype)
    return out


# --- process setup ---------------------------------------------------------------------------------

# custom_op cannot return str, so these two are defined on a plain library fragment.
_lib = torch.library.Library("sgl_kernel", "FRAGMENT")
_lib.define("init_cpu_threads_env(str cpu_ids) -> str")
_lib.define("initialize(int size, int rank) -> ()")


def init_cpu_threads_env(cpu_ids: str) -> str:
    # The C++ op pins OpenMP threads to these cores; the stand-in leaves threads to torch and
    # the operating system.
    return cpu_ids


def initialize(size: int, rank: int) -> None:
    # Sets up the shared-memory all-reduce of tensor parallelism, which these ops do not cover.
    if size != 1:
        raise NotImplementedError("sglang_dspark CPU ops cover tp_size 1 only")


_lib.impl("init_cpu_threads_env", init_cpu_threads_env, "CompositeExplicitAutograd")
_lib.impl("initialize", initialize, "CompositeExplicitAutograd")

__all__ = [name for name, obj in list(globals().items())
           if isinstance(obj, torch._library.custom_ops.CustomOpDef)]
__all__ += ["init_cpu_threads_env", "initialize"]
