"""Growing a trained family (the benchmark family's first stage, blockdraft/fixtures/grow.py):
widening computes exactly what the source computes, for the target and for every drafter;
splitting layers keeps the shapes and moves the taps; the int8 store rounds once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from blockdraft.drafter import Drafter, rope_theta_of
from blockdraft.fixtures.checkpoints import drafter_config
from blockdraft.fixtures.grow import (Growth, grow_drafter_state, grow_target_state,
                                      grown_target_config)
from blockdraft.fixtures.shapes import DrafterShape, GrowthPlan
from blockdraft.fixtures.store import load_config, load_state, round_to_store_precision
from blockdraft.specs import parse_drafter_config
from blockdraft.target import HFTarget

STORE = Path(__file__).resolve().parents[2] / "fixtures" / "models"
WIDER = GrowthPlan(width_multiplier=2, intermediate_size=768, layer_splits=(1, 1, 1, 1))


def target_model(config: dict, state: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    model.load_state_dict(state, strict=False)  # the LM head is tied
    return model.eval()


def drafter(kind: str, target_config: dict, state: dict, taps: list[int]) -> Drafter:
    source = load_config(STORE, f"qwen3/{kind}")
    config = drafter_config(kind, DrafterShape(), target_config,
                            source["dflash_config"]["mask_token_id"], taps)
    module = Drafter(parse_drafter_config(config), target_hidden_size=target_config["hidden_size"],
                     rope_theta=rope_theta_of(config))
    module.load_state_dict(state)
    return module.eval()


@pytest.fixture(scope="module")
def source():
    config = load_config(STORE, "qwen3/target")
    taps = load_config(STORE, "qwen3/dflash")["dflash_config"]["target_layer_ids"]
    return config, load_state(STORE, "qwen3/target"), taps


def test_widening_computes_what_the_source_computes(source):
    config, state, taps = source
    growth = Growth(config, WIDER)
    wide_config = grown_target_config(config, WIDER)
    assert (wide_config["hidden_size"], wide_config["num_attention_heads"],
            wide_config["num_key_value_heads"], wide_config["intermediate_size"]) == (512, 8, 4, 768)
    small, wide = target_model(config, state), target_model(wide_config, grow_target_state(state, growth))
    ids = torch.randint(0, config["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(0))
    small_target, wide_target = HFTarget(small, taps), HFTarget(wide, [growth.tap(t) for t in taps])
    small_logits, small_taps = small_target(ids)
    wide_logits, wide_taps = wide_target(ids)
    torch.testing.assert_close(wide_logits, small_logits, atol=1e-4, rtol=1e-4)
    # every tap unit is its source unit, repeated
    torch.testing.assert_close(wide_taps.view(2, 40, 3, 512)[..., ::2],
                               small_taps.view(2, 40, 3, 256), atol=1e-4, rtol=1e-4)
    for kind in ("dflash", "lilicorr", "dspark"):
        small_drafter = drafter(kind, config, load_state(STORE, f"qwen3/{kind}"), taps)
        wide_drafter = drafter(kind, wide_config, grow_drafter_state(
            load_state(STORE, f"qwen3/{kind}"), growth, len(taps)), taps)
        anchors = ids[:, -1]
        assert torch.equal(wide_drafter.propose(wide_target.heads, wide_taps[:, :-1], anchors, 7),
                           small_drafter.propose(small_target.heads, small_taps[:, :-1], anchors, 7)), kind


def test_splitting_layers_moves_the_taps(source):
    config, state, taps = source
    plan = replace(WIDER, layer_splits=(1, 9, 9, 9))
    growth = Growth(config, plan)
    grown = grow_target_state(state, growth)
    assert grown_target_config(config, plan)["num_hidden_layers"] == 28
    assert [growth.tap(t) for t in taps] == [0, 9, 18]
    # the nine copies of source layer 1 each add a ninth of its update
    o_proj = "self_attn.o_proj.weight"
    copies = [grown[f"model.layers.{i}.{o_proj}"] for i in range(1, 10)]
    assert all(torch.equal(c, copies[0]) for c in copies)
    wide = growth.layer({k.split("layers.1.", 1)[1]: v for k, v in state.items() if ".layers.1." in k})
    torch.testing.assert_close(copies[0] * 9, wide[o_proj])
    with pytest.raises(ValueError, match="one split per source layer"):
        Growth(config, replace(WIDER, layer_splits=(1, 2)))


def test_int8_store_rounding_is_idempotent():
    layer = torch.nn.Linear(256, 128)
    round_to_store_precision(layer, "int8")
    once = layer.weight.detach().clone()
    round_to_store_precision(layer, "int8")
    assert torch.equal(layer.weight, once)
    with pytest.raises(ValueError, match="unknown store precision"):
        round_to_store_precision(layer, "int4")
