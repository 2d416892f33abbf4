"""Drafter checkpoint validation: every bad input gets one line naming the cause and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import save_file

from blockdraft.fixtures.checkpoints import drafter_config, new_drafter
from blockdraft.fixtures.shapes import DrafterShape
from blockdraft.specs import DrafterSpecError, validate_drafter

TARGET = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2,
          "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 300,
          "max_position_embeddings": 512,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
SHAPE = DrafterShape(num_layers=1, block_size=6, dspark_block_size=7, lilicorr_topk=2,
                     lilicorr_hidden_size=32, lilicorr_num_heads=2, lilicorr_num_layers=1,
                     markov_rank=8)


def write_target(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TARGET, **changes}))
    return folder


def write_drafter(folder: Path, kind: str, edit=None, drop=(), extra=None) -> Path:
    """A valid drafter checkpoint of ``kind``; ``edit`` changes its config afterwards."""
    config = drafter_config(kind, SHAPE, TARGET, mask_token_id=3, taps=[0, 2])
    state = new_drafter(config, TARGET, seed=0).state_dict()
    if edit:
        edit(config)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    state = {k: v for k, v in state.items() if k not in drop}
    state.update(extra or {})
    save_file(state, str(folder / "model.safetensors"))
    return folder


def error_of(*args, **kwargs) -> str:
    with pytest.raises(DrafterSpecError) as info:
        validate_drafter(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, "errors are one line"
    return message


@pytest.mark.parametrize("kind,method", [("dflash", "dflash"), ("lilicorr", "lilicorr"),
                                         ("lilicorr", "dflash"), ("dspark", "dspark")])
def test_valid_drafters_pass(tmp_path, kind, method):
    path = write_drafter(tmp_path / kind, kind)
    spec = validate_drafter(path, method, write_target(tmp_path / "target"), num_draft_tokens=5)
    assert spec.kind == kind
    assert spec.max_draft_tokens == (7 if kind == "dspark" else 5)


def test_plain_dflash_given_as_lilicorr(tmp_path):
    msg = error_of(write_drafter(tmp_path / "d", "dflash"), "lilicorr")
    assert "needs a lilicorr drafter" in msg and '"method":"dflash"' in msg


def test_lilicorr_given_as_eagle3(tmp_path):
    msg = error_of(write_drafter(tmp_path / "l", "lilicorr"), "eagle3")
    assert "cannot serve method 'eagle3'" in msg and '"method":"lilicorr"' in msg


def test_lilicorr_given_as_dspark(tmp_path):
    msg = error_of(write_drafter(tmp_path / "l", "lilicorr"), "dspark")
    assert "needs a dspark drafter" in msg


@pytest.mark.parametrize("config,kind", [
    ({"architectures": ["LlamaForCausalLMEagle3"]}, "eagle3"),
    ({"architectures": ["DeepseekV3ForCausalLM"], "num_nextn_predict_layers": 1}, "mtp"),
])
def test_other_methods_given_as_lilicorr(tmp_path, config, kind):
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    msg = error_of(folder, "lilicorr")
    assert f"is a {kind} checkpoint" in msg


@pytest.mark.parametrize("topk", [3, 32, 0])
def test_candidate_topk_must_be_power_of_two_up_to_16(tmp_path, topk):
    def edit(c):
        c["dflash_config"]["lilicorr_candidate_topk"] = topk
    msg = error_of(write_drafter(tmp_path / "l", "lilicorr", edit), "lilicorr")
    assert f"lilicorr_candidate_topk={topk}" in msg and "power of two" in msg


def test_block_size_zero(tmp_path):
    def edit(c):
        c["block_size"] = c["dflash_config"]["block_size"] = 0
    assert "block_size=0" in error_of(write_drafter(tmp_path / "d", "dflash", edit), "dflash")


@pytest.mark.parametrize("n", [0, -1, 6])
def test_draft_length_outside_trained_block(tmp_path, n):
    msg = error_of(write_drafter(tmp_path / "d", "lilicorr"), "lilicorr", num_draft_tokens=n)
    assert f"{n} drafted tokens is outside 1..5" in msg and "block_size=6" in msg


def test_dspark_may_draft_its_whole_block(tmp_path):
    path = write_drafter(tmp_path / "s", "dspark")
    validate_drafter(path, "dspark", num_draft_tokens=7)
    assert "outside 1..7" in error_of(path, "dspark", num_draft_tokens=8)


@pytest.mark.parametrize("change,needle", [
    ({"vocab_size": 400}, "vocabulary 300 != target vocabulary 400"),
    ({"hidden_size": 128}, "hidden size 64 != target hidden size 128"),
    ({"num_hidden_layers": 2}, "target_layer_ids [2] are outside the target's 2 layers"),
])
def test_mismatch_with_target(tmp_path, change, needle):
    msg = error_of(write_drafter(tmp_path / "d", "dflash"), "dflash",
                   write_target(tmp_path / "t", **change))
    assert needle in msg and "trained for this target" in msg


def test_vision_target_uses_its_text_config(tmp_path):
    target = tmp_path / "vl"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(
        {"architectures": ["LlavaForConditionalGeneration"], "text_config": TARGET}))
    validate_drafter(write_drafter(tmp_path / "d", "dflash"), "dflash", target)


def test_missing_weights(tmp_path):
    path = write_drafter(tmp_path / "l", "lilicorr", drop=("lilicorr.in_head.weight",))
    assert "1 weights missing" in error_of(path, "lilicorr")


def test_unexpected_weights(tmp_path):
    import torch
    path = write_drafter(tmp_path / "d", "dflash", extra={"lilicorr.in_head.weight": torch.zeros(1)})
    assert "weights its config does not describe (lilicorr.in_head.weight)" in error_of(path, "dflash")


def test_truncated_safetensors(tmp_path):
    path = write_drafter(tmp_path / "d", "dflash")
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])
    assert "truncated or corrupted" in error_of(path, "dflash")


def test_safetensors_cut_inside_the_tensor_data(tmp_path):
    path = write_drafter(tmp_path / "d", "dflash")
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-100])
    message = error_of(path, "dflash")
    assert f"the file has {len(data) - 100}" in message and "truncated or corrupted" in message
    assert "\n" not in message


def test_markov_rank_only_in_dflash_config(tmp_path):
    def edit(c):
        del c["markov_rank"]
    msg = error_of(write_drafter(tmp_path / "s", "dspark", edit), "dspark")
    assert "no top-level markov_rank (it is only in dflash_config)" in msg


def test_missing_config(tmp_path):
    assert "no config.json" in error_of(tmp_path, "lilicorr")


def test_the_fix_names_the_engine_s_own_selector(tmp_path):
    path = write_drafter(tmp_path / "d", "dflash")
    msg = error_of(path, "dspark", selector=lambda kind: f"--speculative-algorithm {kind.upper()}")
    assert msg.endswith("use --speculative-algorithm DFLASH for it")
