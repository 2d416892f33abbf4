"""``"method": "lilicorr"`` in a speculative config: checked, then spelled the way vLLM runs it.

vLLM already runs LiLiCorr drafters, as ``"method": "dflash"`` with a ``LiLiCorrDraftModel``
checkpoint (the draft architecture, not the method, selects the speculator). So the plugin
checks the drafter against the target before anything loads, fills in the default draft
length, and hands vLLM the dflash spelling; every DFlash code path (target taps, draft KV
cache, slot mapping, parallel drafting) then applies unchanged.

Engine-free apart from the target's Hugging Face config, so it is unit-testable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blockdraft.specs import (
    DrafterSpec,
    DrafterSpecError,
    TargetSpec,
    check_against_target,
    check_draft_length,
    check_weights,
    drafter_kind,
    read_weight_names,
    require_method,
)

METHOD = "lilicorr"
# The method vLLM runs LiLiCorr drafters under (config/speculative.py: DFlashModelTypes).
VLLM_METHOD = "dflash"
# vLLM's architecture name of the format (model_executor/models/registry.py).
ARCHITECTURE = "LiLiCorrDraftModel"
# Our key: num_speculative_tokens becomes the most a step drafts, and each step drafts what its
# verification pays for (blockdraft.draft_length). Carried to the workers as an attribute of
# the built SpeculativeConfig, which vLLM pickles with the rest of VllmConfig.
COST_AWARE = "cost_aware"


def is_lilicorr_draft(speculative_config: Any) -> bool:
    """Whether a built vLLM SpeculativeConfig drafts with a LiLiCorr checkpoint."""
    if speculative_config is None or speculative_config.method != VLLM_METHOD:
        return False
    draft = getattr(speculative_config, "draft_model_config", None)
    return draft is not None and ARCHITECTURE in (draft.architectures or [])


def underscored(spec: dict[str, Any]) -> dict[str, Any]:
    """The user's speculative-config dict with vLLM's spelling of its keys (CLI JSON may use -)."""
    return {key.replace("-", "_"): value for key, value in spec.items()}


def take_cost_aware(spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The user's dict without ``"cost_aware"`` (which vLLM would refuse), and its value."""
    spec = underscored(spec)
    cost_aware = spec.pop(COST_AWARE, False)
    if not isinstance(cost_aware, bool):
        raise DrafterSpecError(f'"{COST_AWARE}" must be true or false, not {cost_aware!r}')
    if cost_aware and spec.get("method") not in (METHOD, VLLM_METHOD):
        raise DrafterSpecError(f'"{COST_AWARE}" is for "method":"{METHOD}" and '
                               f'"{VLLM_METHOD}" drafts, not {spec.get("method")!r}; remove it')
    return spec, cost_aware


def mark_cost_aware(speculative_config: Any) -> None:
    object.__setattr__(speculative_config, COST_AWARE, True)  # not a field: pydantic allows it


def is_cost_aware(speculative_config: Any) -> bool:
    return bool(getattr(speculative_config, COST_AWARE, False))


def prepare(spec: dict[str, Any], target_text_config: Any) -> dict[str, Any]:
    """The speculative-config dict vLLM should build, after checking a LiLiCorr drafter.

    ``spec`` is the user's ``--speculative-config`` / ``LLM(speculative_config=...)`` dict;
    ``target_text_config`` the target's (language-model) Hugging Face config. Raises
    :class:`DrafterSpecError` with one line naming cause and fix. Leaves other methods as they
    are, except that a LiLiCorr checkpoint given to one of them is refused by name.
    """
    spec = underscored(spec)
    method, model = spec.get("method"), spec.get("model")
    if method == METHOD:
        if model is None:
            raise DrafterSpecError('"method":"lilicorr" needs "model": the LiLiCorr drafter\'s '
                                   "checkpoint folder")
        drafter = _check_lilicorr(_local_dir(model, spec), spec, target_text_config)
        return {**spec, "method": VLLM_METHOD,
                "num_speculative_tokens": _draft_length(drafter, spec)}
    if model is None or method is None or not Path(model).is_dir():
        return spec  # nothing local to check, or vLLM's own method detection applies
    folder = Path(model)
    kind = drafter_kind(_read_config(folder))
    if kind != "lilicorr":
        return spec
    if method == VLLM_METHOD:  # upstream's own spelling: run the same checks
        drafter = _check_lilicorr(folder, spec, target_text_config)
        if spec.get("num_speculative_tokens") is not None:
            check_draft_length(drafter, spec["num_speculative_tokens"])
        return spec
    require_method(folder, method)  # a LiLiCorr checkpoint under mtp/eagle3/...: refused
    return spec


def _check_lilicorr(folder: Path, spec: dict[str, Any], target_text_config: Any) -> DrafterSpec:
    drafter = require_method(folder, METHOD)
    check_against_target(drafter, target_spec(target_text_config))
    check_weights(drafter, read_weight_names(folder))
    return drafter


def _draft_length(drafter: DrafterSpec, spec: dict[str, Any]) -> int:
    """num_speculative_tokens, defaulting to all the block's slots (block_size - 1)."""
    length = spec.get("num_speculative_tokens")
    length = drafter.max_draft_tokens if length is None else length
    check_draft_length(drafter, length)
    return length


def target_spec(text_config: Any) -> TargetSpec:
    archs = getattr(text_config, "architectures", None) or ["<none>"]
    return TargetSpec(architecture=archs[0], hidden_size=text_config.hidden_size,
                      vocab_size=text_config.vocab_size,
                      num_hidden_layers=text_config.num_hidden_layers)


def _local_dir(model: str, spec: dict[str, Any]) -> Path:
    """The drafter's folder; a Hub id is fetched (config and weights) the way vLLM would."""
    if Path(model).is_dir():
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, revision=spec.get("revision"),
                                  allow_patterns=["*.json", "*.safetensors"]))


def _read_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # not ours to judge: vLLM reports unreadable checkpoints itself
