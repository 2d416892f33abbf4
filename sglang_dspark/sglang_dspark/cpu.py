"""What SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu``) lacks for DSPARK.

Everything here is activated by :mod:`sglang_dspark.patches` only when SGLang runs on CPU.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

STAND_IN_DIR = Path(__file__).parent / "sgl_kernel_stand_in"
# The op SGLang's CPU attention backend needs first; a CUDA-only sgl_kernel lacks it.
_CPU_PROBE_OP = "decode_attention_cpu"


def on_cpu_engine() -> bool:
    from sglang.srt.utils import is_cpu

    return is_cpu()


def _installed_sgl_kernel_has_cpu_ops() -> bool:
    if importlib.util.find_spec("sgl_kernel") is None:
        return False
    try:
        importlib.import_module("sgl_kernel")
    except Exception:  # a CUDA build fails to load its libraries on a CPU-only machine
        sys.modules.pop("sgl_kernel", None)
        return False
    return hasattr(torch.ops.sgl_kernel, _CPU_PROBE_OP)


def provide_sgl_kernel() -> None:
    """Put the plain-torch ``sgl_kernel`` stand-in first on ``sys.path`` unless a real one with
    CPU ops is installed. Processes SGLang spawns later inherit ``sys.path``, and every SGLang
    module imports ``sgl_kernel`` after plugins load in the launcher."""
    if str(STAND_IN_DIR) in sys.path:
        return
    if _installed_sgl_kernel_has_cpu_ops():
        logger.info("sglang_dspark: using the installed sgl_kernel CPU ops")
        return
    sys.modules.pop("sgl_kernel", None)
    sys.path.insert(0, str(STAND_IN_DIR))
    logger.info("sglang_dspark: no sgl_kernel with CPU ops installed; using the plain-torch "
                "ops of sglang_dspark.cpu_ops (slow, for testing)")


def amx_path_on_any_cpu() -> None:
    """SGLang takes its CPU attention backend (intel_amx, the only one that verifies drafts)
    only where the platform reports AMX, and otherwise falls back to torch_native, which
    crashes on DSPARK's target verify. The backend needs AMX only through sgl_kernel's C++ ops;
    the plain-torch stand-in runs on any CPU, so with it the platform says so, through SGLang's
    own ``override_platform``. A real sgl_kernel keeps the hardware's answer."""
    if str(STAND_IN_DIR) not in sys.path:
        return
    from sglang.srt.runtime_context import get_platform, override_platform

    if not get_platform().has_amx:
        override_platform(has_amx=True).install()


def skip_record_stream_on_cpu(original, tensor: torch.Tensor, stream) -> None:
    """AROUND ``torch.Tensor.record_stream``: a caching-allocator hint for CUDA streams.
    DSparkWorkerV2 calls it on CPU tensors with ``torch.cpu.current_stream()``, which torch
    rejects; like SGLang's own ``record_stream_each``, skip tensors that are not on CUDA."""
    if tensor.device.type == "cpu":
        return None
    return original(tensor, stream)


@contextlib.contextmanager
def profile_dspark_segments(original, observers, name) -> Iterator[None]:
    """AROUND ``DsparkStepObservers.segment``: DSPARK times its draft and target-verify segments
    with CUDA events, which do not exist on CPU. Also enter each segment as a profiler scope
    ("dspark: draft", "dspark: target_verify"), so SGLang's own /start_profile traces show
    where a CPU step's time goes (a no-op while no profiler runs)."""
    from sglang.srt.speculative.dspark_components.dspark_observability import InfoSegment

    with torch.profiler.record_function(f"dspark: {InfoSegment(name).value}"), original(observers, name):
        yield


def chain_verify_tree_topk() -> None:
    """The intel_amx backend reads ``spec_info.tree_topk`` to decide whether a verify batch
    needs a tree mask; DFlash/DSpark verify windows are chains (anchor + drafts, plain causal),
    which is ``tree_topk == 1``, but ``DFlashVerifyInput`` has no such attribute."""
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput

    if not hasattr(DFlashVerifyInput, "tree_topk"):
        DFlashVerifyInput.tree_topk = 1


def chain_sampling_on_cpu() -> None:
    """Sampled DSPARK verifies call ``chain_speculative_sampling_triton`` from
    ``dspark_accept._accept_sampling_core`` with CPU tensors; rebind that one name, in that one
    module, to the plain-torch version (:mod:`sglang_dspark.reject_sampling`, which still hands
    non-CPU tensors to the kernel). No other module's binding changes."""
    from sglang.kernels.ops.speculative.dspark import dspark_accept

    from .reject_sampling import chain_speculative_sampling_any_device

    dspark_accept.chain_speculative_sampling_triton = chain_speculative_sampling_any_device


def allow_cpu_draft_backend() -> None:
    """Let the draft worker accept the CPU attention backend (it falls back to flashinfer
    for any backend outside DRAFT_ATTENTION_BACKEND_CHOICES)."""
    from sglang.srt.server_args import DRAFT_ATTENTION_BACKEND_CHOICES, add_draft_attention_backend_choices

    if CPU_ATTENTION_BACKEND not in DRAFT_ATTENTION_BACKEND_CHOICES:
        add_draft_attention_backend_choices([CPU_ATTENTION_BACKEND])


# SGLang's CPU attention backend: the only one with TARGET_VERIFY and non-causal draft support.
CPU_ATTENTION_BACKEND = "intel_amx"
