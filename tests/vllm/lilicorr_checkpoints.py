"""Drafter checkpoint folders for the vLLM tests: header-only ones for config checks, and
LiLiCorr drafters with a hand-set head derived from a real DFlash drafter."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from blockdraft.specs import read_drafter_spec

LILICORR_KEYS = {"lilicorr_enabled": True, "lilicorr_candidate_topk": 4,
                 "lilicorr_hidden_size": None, "lilicorr_num_heads": 4, "lilicorr_mlp_ratio": 2.0,
                 "lilicorr_factor_dim": 32, "lilicorr_vector_eps": 1e-6,
                 "lilicorr_logit_scale": 10.0, "lilicorr_num_layers": 1}


def drafter_config(arch: str = "LiLiCorrDraftModel", **dflash_config) -> dict:
    """A config.json of the project's planned drafter shape (width 256, 2 layers, block 8)."""
    extra = dict(LILICORR_KEYS) if arch == "LiLiCorrDraftModel" else {}
    extra.update(dflash_config)
    return {"architectures": [arch], "model_type": "qwen3", "hidden_size": 256,
            "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 2048, "rms_norm_eps": 1e-6,
            "block_size": 8,
            "dflash_config": {"mask_token_id": 3, "target_layer_ids": [0, 2, 3], "block_size": 8,
                              **extra}}


def write_checkpoint(folder: Path, config: dict, names=None, drop=(), add=()) -> Path:
    """config.json plus a safetensors file holding ``names`` (default: exactly the tensors the
    config describes, minus ``drop``, plus ``add``) as one-element tensors."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if names is None:
        names = set(read_drafter_spec(folder).expected_weight_names())
    names = (set(names) - set(drop)) | set(add)
    save_file({n: torch.zeros(1) for n in sorted(names)}, folder / "model.safetensors")
    return folder


def lilicorr_with_fixed_rank(dflash: Path, folder: Path, rank: int) -> Path:
    """A LiLiCorr drafter = ``dflash``'s backbone + a head that always walks through candidate
    ``rank`` of every slot: its drafts are the DFlash argmax for rank 0.

    The lattice layer is made the identity, the rank embedding dominates every candidate's
    state, and the factor heads map "is this rank" to +/- one fixed unit vector, so every start
    and pair score is +1 into the chosen rank and -1 elsewhere.
    """
    config = json.loads((dflash / "config.json").read_text())
    config["architectures"] = ["LiLiCorrDraftModel"]
    config["dflash_config"] = {**config["dflash_config"], **LILICORR_KEYS}
    tensors = load_file(dflash / "model.safetensors")
    h, f, k, heads = config["hidden_size"], LILICORR_KEYS["lilicorr_factor_dim"], 4, 4
    block = config["dflash_config"]["block_size"]
    head = {name: torch.zeros(shape) for name, shape in {
        "pass_hidden_proj.weight": (h, h), "pass_hidden_proj.bias": (h,),
        "context_proj.weight": (h, h), "context_proj.bias": (h,),
        "feature_norm.weight": (5,), "feature_norm.bias": (5,),
        "feature_mlp.up_proj.weight": (h, 5), "feature_mlp.up_proj.bias": (h,),
        "feature_mlp.down_proj.weight": (h, h), "feature_mlp.down_proj.bias": (h,),
        "slot_embedding": (1, 1, block - 1, 1, h), "rank_embedding": (1, 1, 1, k, h),
        "relative_slot_bias": (heads, 2 * block - 1), "same_slot_bias": (heads,),
        "output_norm.weight": (h,), "anchor_norm.weight": (h,),
        "factor_input_proj.weight": (h, 3 * h), "factor_input_proj.bias": (h,),
        "out_head.weight": (f, h), "out_head.bias": (f,),
        "in_head.weight": (f, h), "in_head.bias": (f,),
        "anchor_out_head.weight": (f, h), "anchor_out_head.bias": (f,),
        "layers.0.attn_norm.weight": (h,), "layers.0.mlp_norm.weight": (h,),
        "layers.0.attn.in_proj_weight": (3 * h, h), "layers.0.attn.in_proj_bias": (3 * h,),
        "layers.0.attn.out_proj.weight": (h, h), "layers.0.attn.out_proj.bias": (h,),
        "layers.0.mlp.up_proj.weight": (2 * h, h), "layers.0.mlp.up_proj.bias": (2 * h,),
        "layers.0.mlp.down_proj.weight": (h, 2 * h), "layers.0.mlp.down_proj.bias": (h,),
    }.items()}
    for name in ("feature_norm.weight", "output_norm.weight", "anchor_norm.weight",
                 "layers.0.attn_norm.weight", "layers.0.mlp_norm.weight"):
        head[name].fill_(1.0)
    # Coordinate 0 of a candidate's state says "chosen rank", coordinate 1 "any other rank".
    head["rank_embedding"][..., :, 1] = 100.0
    head["rank_embedding"][..., rank, 1] = 0.0
    head["rank_embedding"][..., rank, 0] = 100.0
    head["factor_input_proj.weight"][:, :h] = torch.eye(h)
    head["out_head.bias"][0] = 1.0
    head["anchor_out_head.bias"][0] = 1.0
    head["in_head.weight"][0, 0] = 1.0
    head["in_head.weight"][0, 1] = -1.0
    tensors.update({"lilicorr." + name: value for name, value in head.items()})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, folder / "model.safetensors")
    return folder
