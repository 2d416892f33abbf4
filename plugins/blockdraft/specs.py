"""Typed drafter checkpoint specs, read from config.json, and their validation.

The formats are the ones the pinned engines load:
- DFlash: ``architectures: ["DFlashDraftModel"]`` with ``dflash_config`` (vLLM, SGLang,
  llama.cpp's convert_hf_to_gguf.py).
- LiLiCorr: ``["LiLiCorrDraftModel"]``, the DFlash backbone plus ``lilicorr_*`` keys in
  ``dflash_config`` and ``lilicorr.*`` weights (vLLM's and SGLang's LiLiCorr format).
- DSpark: ``["Qwen3DSparkModel"]`` / ``["Lfm2DSparkDraftModel"]`` / ``["DSparkDraftModel"]``,
  the backbone plus a Markov head (top-level ``markov_rank``, ``markov_head_type``) and an
  optional confidence head (SGLang's DSpark format, which llama.cpp converts too).

Every check raises :class:`DrafterSpecError` with one line naming the cause and the fix, and
runs on config.json and the safetensors header only, so engines can call it before loading.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

DFLASH_ARCHITECTURES = frozenset({"DFlashDraftModel"})
LILICORR_ARCHITECTURES = frozenset({"LiLiCorrDraftModel"})
DSPARK_ARCHITECTURES = frozenset({"DSparkDraftModel", "Qwen3DSparkModel", "Lfm2DSparkDraftModel"})
# Drafters of other methods, recognised only to say what was given instead.
OTHER_DRAFTER_KINDS = {
    "DFlash2DraftModel": "dflash2",
    "LlamaForCausalLMEagle3": "eagle3",
    "Eagle3LlamaForCausalLM": "eagle3",
    "EagleLlamaForCausalLM": "eagle",
    "DeepSeekMTPModel": "mtp",
    "Qwen3NextMTP": "mtp",
}
KIND_TO_METHOD = {"dflash": "dflash", "lilicorr": "lilicorr", "dspark": "dspark",
                  "dflash2": "dflash", "eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp"}
MAX_CANDIDATE_TOPK = 16


class DrafterSpecError(ValueError):
    """A drafter checkpoint that cannot serve as asked; the message names cause and fix."""


@dataclass(frozen=True)
class BackboneSpec:
    """The DFlash block-drafting backbone shared by all three drafter kinds."""

    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    block_size: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None
    mask_token_id: int
    has_own_lm_head: bool


@dataclass(frozen=True)
class LiLiCorrHeadSpec:
    candidate_topk: int
    hidden_size: int  # resolved: lilicorr_hidden_size or the backbone's hidden size
    num_heads: int
    mlp_ratio: float
    factor_dim: int
    vector_eps: float
    logit_scale: float
    num_layers: int


@dataclass(frozen=True)
class DSparkHeadSpec:
    markov_rank: int
    markov_head_type: str
    sample_from_anchor: bool
    confidence_head: bool
    confidence_head_with_markov: bool


@dataclass(frozen=True)
class DrafterSpec:
    kind: str  # "dflash" | "lilicorr" | "dspark"
    architecture: str
    path: Path
    backbone: BackboneSpec
    lilicorr: LiLiCorrHeadSpec | None = None
    dspark: DSparkHeadSpec | None = None

    @property
    def max_draft_tokens(self) -> int:
        """Tokens one block can draft: a DSpark drafter that samples from the anchor drafts
        ``block_size`` tokens; the others spend the first block slot on the anchor token."""
        if self.dspark is not None and self.dspark.sample_from_anchor:
            return self.backbone.block_size
        return self.backbone.block_size - 1

    def expected_weight_names(self) -> frozenset[str]:
        """The tensors the checkpoint must hold (embeddings and LM head come from the target)."""
        names = set(backbone_weight_names(self.backbone))
        if self.backbone.has_own_lm_head:
            names.add("lm_head.weight")
        if self.lilicorr is not None:
            names |= {"lilicorr." + n for n in lilicorr_weight_names(self.lilicorr, self.backbone)}
        if self.dspark is not None:
            names |= {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight"}
            if self.dspark.confidence_head:
                names |= {"confidence_head.proj.weight", "confidence_head.proj.bias"}
        return frozenset(names)


@dataclass(frozen=True)
class TargetSpec:
    """What a drafter must agree with in its target (the language model of a VL target)."""

    architecture: str
    hidden_size: int
    vocab_size: int
    num_hidden_layers: int


def backbone_weight_names(backbone: BackboneSpec) -> list[str]:
    names = ["fc.weight", "hidden_norm.weight", "norm.weight"]
    for i in range(backbone.num_hidden_layers):
        p = f"layers.{i}."
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [p + f"self_attn.{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "o_proj",
                                                         "q_norm", "k_norm")]
        names += [p + f"mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")]
    return names


def lilicorr_weight_names(head: LiLiCorrHeadSpec, backbone: BackboneSpec) -> list[str]:
    """Parameter names of the LiLiCorr head, relative to ``lilicorr.``."""
    linear = ["pass_hidden_proj", "context_proj", "factor_input_proj", "out_head", "in_head",
              "anchor_out_head", "feature_mlp.up_proj", "feature_mlp.down_proj"]
    if head.hidden_size != backbone.hidden_size:
        linear.append("token_proj")
    names = [f"{m}.{p}" for m in linear for p in ("weight", "bias")]
    names += ["feature_norm.weight", "feature_norm.bias", "slot_embedding", "rank_embedding",
              "relative_slot_bias", "same_slot_bias", "output_norm.weight", "anchor_norm.weight"]
    for i in range(head.num_layers):
        p = f"layers.{i}."
        names += [p + "attn_norm.weight", p + "mlp_norm.weight", p + "attn.in_proj_weight",
                  p + "attn.in_proj_bias"]
        names += [p + f"{m}.{q}" for m in ("attn.out_proj", "mlp.up_proj", "mlp.down_proj")
                  for q in ("weight", "bias")]
    return names


def _load_config(path: Path) -> dict[str, Any]:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise DrafterSpecError(f"{path}: no config.json; pass the drafter's checkpoint folder")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise DrafterSpecError(f"{config_file}: not valid JSON ({exc}); re-export the drafter") from exc


def drafter_kind(config: dict[str, Any]) -> str:
    """'dflash', 'lilicorr', 'dspark', another method's kind, or 'unknown'."""
    archs = config.get("architectures") or []
    arch = archs[0] if archs else ""
    if arch in LILICORR_ARCHITECTURES:
        return "lilicorr"
    if arch in DSPARK_ARCHITECTURES:
        return "dspark"
    if arch in DFLASH_ARCHITECTURES:
        return "dflash"
    if arch in OTHER_DRAFTER_KINDS:
        return OTHER_DRAFTER_KINDS[arch]
    if config.get("num_nextn_predict_layers"):
        return "mtp"
    return "unknown"


def _int(where: str, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DrafterSpecError(f"{where}: {key}={value!r} must be an integer >= {minimum}; "
                               "fix the drafter's config.json")
    return value


def _positive(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise DrafterSpecError(f"{where}: {key}={value!r} must be a positive number; "
                               "fix the drafter's config.json")
    return float(value)


def _require(where: str, mapping: dict[str, Any], key: str, section: str) -> Any:
    if key not in mapping or mapping[key] is None:
        raise DrafterSpecError(f"{where}: {section} has no {key}; add it to the drafter's config.json")
    return mapping[key]


def _read_backbone(where: str, config: dict[str, Any], draft: dict[str, Any]) -> BackboneSpec:
    hidden = _int(where, "hidden_size", _require(where, config, "hidden_size", "config"), 1)
    heads = _int(where, "num_attention_heads",
                 _require(where, config, "num_attention_heads", "config"), 1)
    block_size = draft.get("block_size", config.get("block_size"))
    if block_size is None:
        raise DrafterSpecError(f"{where}: no block_size in dflash_config or config; "
                               "add the block size the drafter was trained with")
    block_size = _int(where, "block_size", block_size, 1)
    layer_ids = _require(where, draft, "target_layer_ids", "dflash_config")
    if (not isinstance(layer_ids, list) or not layer_ids
            or any(isinstance(i, bool) or not isinstance(i, int) for i in layer_ids)):
        raise DrafterSpecError(f"{where}: target_layer_ids={layer_ids!r} must be a non-empty list "
                               "of target layer indices; fix the drafter's config.json")
    if len(set(layer_ids)) != len(layer_ids) or min(layer_ids) < 0:
        raise DrafterSpecError(f"{where}: target_layer_ids={layer_ids} must be distinct and >= 0; "
                               "fix the drafter's config.json")
    num_target_layers = draft.get("num_target_layers")
    if num_target_layers is not None:
        num_target_layers = _int(where, "num_target_layers", num_target_layers, 1)
    return BackboneSpec(
        hidden_size=hidden,
        vocab_size=_int(where, "vocab_size", _require(where, config, "vocab_size", "config"), 1),
        num_hidden_layers=_int(where, "num_hidden_layers",
                               _require(where, config, "num_hidden_layers", "config"), 1),
        num_attention_heads=heads,
        num_key_value_heads=_int(where, "num_key_value_heads",
                                 config.get("num_key_value_heads", heads), 1),
        head_dim=_int(where, "head_dim", config.get("head_dim") or hidden // heads, 1),
        intermediate_size=_int(where, "intermediate_size",
                               _require(where, config, "intermediate_size", "config"), 1),
        rms_norm_eps=_positive(where, "rms_norm_eps", config.get("rms_norm_eps", 1e-6)),
        block_size=block_size,
        target_layer_ids=tuple(layer_ids),
        num_target_layers=num_target_layers,
        mask_token_id=_int(where, "mask_token_id",
                           draft.get("mask_token_id", config.get("mask_token_id")), 0),
        has_own_lm_head=bool(config.get("has_own_lm_head", False)),
    )


def _read_lilicorr(where: str, draft: dict[str, Any], backbone: BackboneSpec) -> LiLiCorrHeadSpec:
    if draft.get("lilicorr_enabled", True) is not True:
        raise DrafterSpecError(f"{where}: lilicorr_enabled is not true; a LiLiCorrDraftModel needs "
                               "its head enabled (or serve the backbone as a DFlashDraftModel)")
    topk = _require(where, draft, "lilicorr_candidate_topk", "dflash_config")
    if (isinstance(topk, bool) or not isinstance(topk, int) or topk <= 0
            or topk > MAX_CANDIDATE_TOPK or topk & (topk - 1)):
        raise DrafterSpecError(f"{where}: lilicorr_candidate_topk={topk!r} must be a power of two "
                               f"<= {MAX_CANDIDATE_TOPK}; fix the drafter's config.json")
    hidden = draft.get("lilicorr_hidden_size") or backbone.hidden_size
    hidden = _int(where, "lilicorr_hidden_size", hidden, 1)
    heads = _int(where, "lilicorr_num_heads",
                 _require(where, draft, "lilicorr_num_heads", "dflash_config"), 1)
    if hidden % heads:
        raise DrafterSpecError(f"{where}: lilicorr_hidden_size={hidden} is not divisible by "
                               f"lilicorr_num_heads={heads}; fix the drafter's config.json")
    return LiLiCorrHeadSpec(
        candidate_topk=topk,
        hidden_size=hidden,
        num_heads=heads,
        mlp_ratio=_positive(where, "lilicorr_mlp_ratio",
                            _require(where, draft, "lilicorr_mlp_ratio", "dflash_config")),
        factor_dim=_int(where, "lilicorr_factor_dim",
                        _require(where, draft, "lilicorr_factor_dim", "dflash_config"), 1),
        vector_eps=_positive(where, "lilicorr_vector_eps",
                             _require(where, draft, "lilicorr_vector_eps", "dflash_config")),
        logit_scale=_positive(where, "lilicorr_logit_scale",
                              _require(where, draft, "lilicorr_logit_scale", "dflash_config")),
        num_layers=_int(where, "lilicorr_num_layers",
                        _require(where, draft, "lilicorr_num_layers", "dflash_config"), 0),
    )


def _read_dspark(where: str, config: dict[str, Any], draft: dict[str, Any]) -> DSparkHeadSpec:
    # SGLang builds the Markov head from the top-level keys only (srt/models/dspark.py).
    if "markov_rank" not in config:
        hint = " (it is only in dflash_config)" if "markov_rank" in draft else ""
        raise DrafterSpecError(f"{where}: DSpark drafter has no top-level markov_rank{hint}; "
                               "DSpark needs its Markov head: add markov_rank > 0 to config.json")
    rank = _int(where, "markov_rank", config["markov_rank"], 1)
    head_type = str(config.get("markov_head_type", "vanilla")).lower()
    if head_type not in ("vanilla", "gated", "rnn"):
        raise DrafterSpecError(f"{where}: markov_head_type={head_type!r} is not vanilla, gated or "
                               "rnn; fix the drafter's config.json")
    confidence = bool(config.get("enable_confidence_head", False))
    return DSparkHeadSpec(
        markov_rank=rank,
        markov_head_type=head_type,
        sample_from_anchor=bool(draft.get("sample_from_anchor",
                                          config.get("sample_from_anchor", True))),
        confidence_head=confidence,
        confidence_head_with_markov=bool(config.get("confidence_head_with_markov", True)),
    )


def parse_drafter_config(config: dict[str, Any], path: str | Path = "<config>") -> DrafterSpec:
    """Validate a DFlash, LiLiCorr or DSpark drafter config (the content of config.json)."""
    path = Path(path)
    kind = drafter_kind(config)
    arch = (config.get("architectures") or ["<none>"])[0]
    if kind not in ("dflash", "lilicorr", "dspark"):
        raise DrafterSpecError(
            f"{path}: architectures={arch!r} is a {kind} checkpoint, not a DFlash, LiLiCorr or "
            "DSpark drafter; pass a drafter folder whose config.json names one of "
            f"{sorted(DFLASH_ARCHITECTURES | LILICORR_ARCHITECTURES | DSPARK_ARCHITECTURES)}")
    draft = dict(config.get("dflash_config") or {})
    draft.update(config.get("dspark_config") or {})
    where = f"{path} ({arch})"
    backbone = _read_backbone(where, config, draft)
    if backbone.mask_token_id >= backbone.vocab_size:
        raise DrafterSpecError(f"{where}: mask_token_id={backbone.mask_token_id} is outside the "
                               f"vocabulary of {backbone.vocab_size}; fix the drafter's config.json")
    return DrafterSpec(
        kind=kind,
        architecture=arch,
        path=path,
        backbone=backbone,
        lilicorr=_read_lilicorr(where, draft, backbone) if kind == "lilicorr" else None,
        dspark=_read_dspark(where, config, draft) if kind == "dspark" else None,
    )


def read_drafter_spec(path: str | Path) -> DrafterSpec:
    """Read and validate a drafter checkpoint folder's config.json."""
    return parse_drafter_config(_load_config(Path(path)), path)


def require_method(path: str | Path, method: str,
                   selector: Callable[[str], str] = lambda kind: f'"method":"{kind}"') -> DrafterSpec:
    """The drafter at ``path`` read for ``method``; a checkpoint of another kind is an error.
    ``selector(kind)`` says how the user picks a method in their engine (default: vLLM's
    ``--speculative-config`` spelling), for the fix the message suggests."""
    path = Path(path)
    config = _load_config(path)
    kind = drafter_kind(config)
    arch = (config.get("architectures") or ["<none>"])[0]
    wanted = {"lilicorr": "lilicorr", "dspark": "dspark"}.get(method)
    if wanted is not None and kind != wanted:
        given = KIND_TO_METHOD.get(kind)
        fix = f"use {selector(given)} for it" if given else "pass a drafter of that kind"
        raise DrafterSpecError(f"{path}: method {method!r} needs a {wanted} drafter, but "
                               f"architectures={arch!r} is a {kind} checkpoint; {fix}")
    if wanted is None and kind in ("lilicorr", "dspark") and method not in ("dflash", kind):
        raise DrafterSpecError(f"{path}: architectures={arch!r} is a {kind} drafter and cannot "
                               f"serve method {method!r}; use {selector(kind)}")
    return read_drafter_spec(path)


def check_draft_length(spec: DrafterSpec, num_draft_tokens: int) -> None:
    """A requested drafted length must fit the block the drafter was trained with."""
    limit = spec.max_draft_tokens
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) \
            or not 1 <= num_draft_tokens <= limit:
        raise DrafterSpecError(
            f"{spec.path}: {num_draft_tokens!r} drafted tokens is outside 1..{limit} for a "
            f"{spec.kind} drafter trained with block_size={spec.backbone.block_size}; "
            f"ask for at most {limit}")


def read_target_spec(path: str | Path) -> TargetSpec:
    """The target's language-model shape, from its config.json (text_config for VL models)."""
    path = Path(path)
    config = _load_config(path)
    arch = (config.get("architectures") or ["<none>"])[0]
    text = config.get("text_config") or config
    where = f"{path} ({arch})"
    return TargetSpec(
        architecture=arch,
        hidden_size=_int(where, "hidden_size", _require(where, text, "hidden_size", "config"), 1),
        vocab_size=_int(where, "vocab_size", _require(where, text, "vocab_size", "config"), 1),
        num_hidden_layers=_int(where, "num_hidden_layers",
                               _require(where, text, "num_hidden_layers", "config"), 1),
    )


def check_against_target(spec: DrafterSpec, target: TargetSpec) -> None:
    """The drafter reads the target's hidden states and shares its vocabulary."""
    b = spec.backbone
    if b.vocab_size != target.vocab_size:
        raise DrafterSpecError(f"{spec.path}: drafter vocabulary {b.vocab_size} != target "
                               f"vocabulary {target.vocab_size}; use a drafter trained for this target")
    if b.hidden_size != target.hidden_size:
        raise DrafterSpecError(f"{spec.path}: drafter hidden size {b.hidden_size} != target hidden "
                               f"size {target.hidden_size}; use a drafter trained for this target")
    outside = [i for i in b.target_layer_ids if i >= target.num_hidden_layers]
    if outside:
        raise DrafterSpecError(f"{spec.path}: target_layer_ids {outside} are outside the target's "
                               f"{target.num_hidden_layers} layers; use a drafter trained for this target")
    if b.num_target_layers is not None and b.num_target_layers != target.num_hidden_layers:
        raise DrafterSpecError(f"{spec.path}: drafter was trained on a {b.num_target_layers}-layer "
                               f"target, this one has {target.num_hidden_layers}; use a drafter "
                               "trained for this target")


def read_weight_names(path: str | Path) -> set[str]:
    """Tensor names of a checkpoint's safetensors files, from their headers alone (and their
    sizes, which the headers fix)."""
    path = Path(path)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise DrafterSpecError(f"{path}: no *.safetensors weights; pass a complete checkpoint folder")
    names: set[str] = set()
    for file in files:
        try:
            with file.open("rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                if length > file.stat().st_size - 8:
                    raise ValueError("header longer than the file")
                header = json.loads(f.read(length))
            # the tensors' byte ranges must end where the file does: a cut copy keeps its header
            data_end = max((v["data_offsets"][1] for k, v in header.items()
                            if k != "__metadata__"), default=0)
            if 8 + length + data_end != file.stat().st_size:
                raise ValueError(f"tensors end at byte {8 + length + data_end}, the file has "
                                 f"{file.stat().st_size}")
        except (struct.error, ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
            raise DrafterSpecError(f"{file}: unreadable safetensors file ({exc}); the file is "
                                   "truncated or corrupted, copy it again") from exc
        names.update(k for k in header if k != "__metadata__")
    return names


def check_weights(spec: DrafterSpec, names: Iterable[str]) -> None:
    """The checkpoint holds exactly the tensors its config describes (target-shared
    ``embed_tokens`` may be present too)."""
    names = {n.removeprefix("model.") for n in names}
    expected = spec.expected_weight_names()
    missing = sorted(expected - names)
    unexpected = sorted(names - expected - {"embed_tokens.weight", "lm_head.weight"})
    if missing:
        shown = ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")
        raise DrafterSpecError(f"{spec.path}: {len(missing)} weights missing for its config "
                               f"({shown}); the checkpoint is incomplete or its config is wrong")
    if unexpected:
        shown = ", ".join(unexpected[:4]) + (" ..." if len(unexpected) > 4 else "")
        raise DrafterSpecError(f"{spec.path}: {len(unexpected)} weights its config does not describe "
                               f"({shown}); the checkpoint does not match its config.json")


def validate_drafter(path: str | Path, method: str, target_path: str | Path | None = None,
                     num_draft_tokens: int | None = None,
                     selector: Callable[[str], str] | None = None) -> DrafterSpec:
    """Everything an engine should check before loading a drafter for ``method``."""
    spec = require_method(path, method, selector) if selector else require_method(path, method)
    if target_path is not None:
        check_against_target(spec, read_target_spec(target_path))
    if num_draft_tokens is not None:
        check_draft_length(spec, num_draft_tokens)
    check_weights(spec, read_weight_names(path))
    return spec
