"""blockdraft's reference LiLiCorrHead equals vLLM 0.32's LiLiCorrHead on the same weights."""

import pytest
import torch

from blockdraft.lattice import LiLiCorrHead as ReferenceHead
from blockdraft.specs import LiLiCorrHeadSpec

SPEC = LiLiCorrHeadSpec(candidate_topk=4, hidden_size=256, num_heads=4, mlp_ratio=2.0,
                        factor_dim=32, vector_eps=1e-6, logit_scale=10.0, num_layers=2)
BLOCK, MODEL_HIDDEN, EPS = 8, 256, 1e-6


@pytest.fixture(scope="module")
def vllm_head():
    """vLLM's head built, loaded and post-processed as its engine does on CPU (fp32, eager)."""
    from vllm.config import CompilationConfig, CompilationMode, VllmConfig, set_current_vllm_config
    from vllm.distributed import (destroy_distributed_environment, destroy_model_parallel,
                                  init_distributed_environment, initialize_model_parallel)
    from vllm.model_executor.models.lilicorr import LiLiCorrHead
    from vllm.model_executor.models.utils import AutoWeightsLoader

    config = {"lilicorr_hidden_size": None, "lilicorr_candidate_topk": SPEC.candidate_topk,
              "lilicorr_num_heads": SPEC.num_heads, "lilicorr_mlp_ratio": SPEC.mlp_ratio,
              "lilicorr_factor_dim": SPEC.factor_dim, "lilicorr_vector_eps": SPEC.vector_eps,
              "lilicorr_logit_scale": SPEC.logit_scale, "lilicorr_num_layers": SPEC.num_layers}
    vllm_config = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method="tcp://127.0.0.1:8150")
        initialize_model_parallel(1)
        head = LiLiCorrHead(model_hidden_size=MODEL_HIDDEN, block_size=BLOCK, rms_norm_eps=EPS,
                            config=config, prefix="model.lilicorr")
        torch.manual_seed(0)
        reference = ReferenceHead(SPEC, model_hidden_size=MODEL_HIDDEN, block_size=BLOCK,
                                  rms_norm_eps=EPS)
        with torch.no_grad():  # linears keep torch's init; zeros and ones get perturbed
            for value in reference.parameters():
                value.add_(torch.randn_like(value) * 0.1)
        AutoWeightsLoader(head).load_weights(reference.state_dict().items())
        # The order LiLiCorrForCausalLM.load_weights and the model loader use: buffers from
        # the loaded weights, then the CPU GEMM packing (which drops the linear weights).
        head.materialize_inference_buffers(torch.device("cpu"), torch.float32)
        for module in head.modules():
            method = getattr(module, "quant_method", None)
            if method is not None:
                method.process_weights_after_loading(module)
        yield head, reference
        destroy_model_parallel()
        destroy_distributed_environment()


@pytest.mark.parametrize("batch,slots", [(3, 7), (1, 7), (5, 4), (2, 1)])
def test_reference_head_equals_vllm_head(vllm_head, batch, slots):
    head, reference = vllm_head
    torch.manual_seed(batch * 10 + slots)
    inputs = (torch.randn(batch, slots, 4, MODEL_HIDDEN),
              torch.randn(batch, slots, 4).log_softmax(-1),
              torch.randn(batch, slots, MODEL_HIDDEN),
              torch.randn(batch, MODEL_HIDDEN),
              torch.tensor([True, False, True, True, False][:batch]))
    with torch.inference_mode():
        expected = head.forward(*inputs)
        actual = reference(*inputs)
    assert actual.shape == (batch, slots, 4, 4)
    difference = (actual - expected).abs().max().item()
    print(f"max |reference - vLLM| = {difference:.2e}")
    assert difference <= 1e-5
    assert expected.std().item() > 0.05  # scores differ: the comparison is not between zeros
