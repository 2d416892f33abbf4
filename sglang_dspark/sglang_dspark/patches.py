"""Every change this plugin makes to SGLang 0.5.23, in one place, each with its reason.

``DSPARK`` is a built-in, reserved algorithm name, so the plugin keeps it and hooks the
built-in path (``HookRegistry``, applied by SGLang's ``load_plugins`` in every process).
The DSPARK hook runs only when the user asked for DSPARK; the CPU changes only when SGLang runs
on CPU (``SGLANG_USE_CPU_ENGINE=1``), where upstream DSPARK cannot run at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import cpu, dspark_args, short_conv


@dataclass(frozen=True)
class HookPatch:
    target: str
    hook_type: str  # a sglang HookType name
    hook: Callable
    cpu_only: bool
    reason: str


HOOKS = (
    HookPatch(
        "sglang.srt.arg_groups.speculative_hook._handle_dspark", "AROUND",
        dspark_args.handle_dspark, cpu_only=False,
        reason="DSPARK argument resolution: lift the CUDA/NPU/XPU-only gate on CPU, map a CUDA "
               "draft attention backend to the CPU one (one log line), check the drafter against "
               "the target and --speculative-dspark-block-size against the trained block, all "
               "before any model loads"),
    HookPatch(
        "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_fn", "REPLACE",
        short_conv.causal_conv1d_fn, cpu_only=True,
        reason="LFM2 short-conv prefill runs this Triton kernel on every non-CUDA device; "
               "Triton has no CPU driver"),
    HookPatch(
        "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update", "REPLACE",
        short_conv.causal_conv1d_update, cpu_only=True,
        reason="LFM2 short-conv decode, and verify with the rollback tape that restores the "
               "conv state of the last accepted token (Triton, as above)"),
    HookPatch(
        "sglang.kernels.ops.mamba.mamba_state_scatter_triton.scatter_mamba_states_after_mtp_verify",
        "REPLACE", short_conv.scatter_mamba_states_after_mtp_verify, cpu_only=True,
        reason="the rollback after verify: copies the conv state of each request's last "
               "accepted token from the tape (Triton, as above)"),
    HookPatch(
        "torch.Tensor.record_stream", "AROUND",
        cpu.skip_record_stream_on_cpu, cpu_only=True,
        reason="DSparkWorkerV2 records seq_lens on the CPU 'stream', which torch rejects"),
    HookPatch(
        "sglang.srt.speculative.dspark_components.dspark_observability.DsparkStepObservers.segment",
        "AROUND", cpu.profile_dspark_segments, cpu_only=True,
        reason="DSPARK times its draft and verify segments with CUDA events only; on CPU they "
               "also become profiler scopes, so /start_profile traces split a step (ci/bench.py)"),
)

# Changes that are not function hooks (HookRegistry can only wrap existing attributes).
OTHER_CPU_CHANGES = (
    (cpu.provide_sgl_kernel,
     "sgl_kernel CPU ops: SGLang's CPU engine imports them everywhere and no registry ships "
     "them; a plain-torch stand-in goes on sys.path unless a real CPU build is installed"),
    (cpu.amx_path_on_any_cpu,
     "SGLang uses its CPU attention backend (intel_amx, the only one with target verify) only "
     "on AMX CPUs and otherwise torch_native, which cannot verify; with the plain-torch "
     "stand-in ops the backend runs on any CPU: say so through override_platform(has_amx=True)"),
    (cpu.allow_cpu_draft_backend,
     "draft workers accept only DRAFT_ATTENTION_BACKEND_CHOICES; add the CPU backend (intel_amx) "
     "through SGLang's add_draft_attention_backend_choices"),
    (cpu.chain_verify_tree_topk,
     "intel_amx reads spec_info.tree_topk, which DFlashVerifyInput lacks; a DSpark verify "
     "window is a chain (tree_topk = 1)"),
    (cpu.chain_sampling_on_cpu,
     "sampled (temperature > 0) DSPARK verifies run the Triton rejection sampler "
     "chain_speculative_sampling_triton on CPU tensors too; rebind that name in "
     "sglang.kernels.ops.speculative.dspark.dspark_accept only (not a HookRegistry REPLACE, "
     "which would rebind every importer) to the plain-torch version in reject_sampling.py"),
)


def apply() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    on_cpu = cpu.on_cpu_engine()
    if on_cpu:
        for change, _reason in OTHER_CPU_CHANGES:
            change()
    for patch in HOOKS:
        if on_cpu or not patch.cpu_only:
            HookRegistry.register(patch.target, patch.hook, HookType[patch.hook_type])
