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
    assert len(PATCH_POINTS := patches.PATCH_POINTS) == 5
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
    import vllm._C  # noqa: F401  (registers the C++ kernel)
    from vllm.utils.cpu_triton_utils import _expand_kernel_impl

    values, cu = expand_inputs(torch.float32)
    output = torch.full((7,), -3.0)
    _expand_kernel_impl(output, values, cu, 0, 1)
    assert output.tolist() == [-3.0] * 7  # the result went to a discarded int64 copy
