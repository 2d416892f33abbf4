"""DSPARK server-argument resolution: CPU device, draft backend, block size, drafter checks.

One AROUND hook on SGLang's ``_handle_dspark`` (it runs only for ``--speculative-algorithm
DSPARK``, in the launcher, before any model loads).

Block size, decided once: a DSpark drafter samples from the anchor, so its config.json
``block_size`` is gamma, the number of tokens one block drafts (SGLang 0.5.23 reads it so,
``dspark_config.py``), and ``--speculative-dspark-block-size`` counts drafted tokens too; the
verify window is gamma + 1 (anchor included). Without the flag the drafter's value is used; the
flag may lower it; above the trained value is an error (upstream only warns).
"""

from __future__ import annotations

import logging
from pathlib import Path

from blockdraft.specs import DrafterSpec, DrafterSpecError, check_draft_length, validate_drafter

from .cpu import CPU_ATTENTION_BACKEND

logger = logging.getLogger(__name__)

SOURCE = "sglang_dspark"
# How a user selects each drafter kind's method in SGLang (LiLiCorr drafters are DFLASH drafts).
ALGORITHM_OF_METHOD = {"dflash": "DFLASH", "lilicorr": "DFLASH", "dspark": "DSPARK",
                       "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN"}


def algorithm_flag(method: str) -> str:
    return f"--speculative-algorithm {ALGORITHM_OF_METHOD.get(method, method.upper())}"


def handle_dspark(original, server_args) -> None:
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    spec = _drafter_spec(server_args)  # before the built-in handler touches the drafter
    if cfg.device == "cpu":
        _refuse_compact_verify_on_cpu()
        # The built-in handler's only use of the device is its CUDA/NPU/XPU gate, which
        # predates the CPU kernels this plugin supplies: present a gated device for the call.
        declare_resolution(server_args, SOURCE, device="cuda")
        try:
            original(server_args)
        finally:
            declare_resolution(server_args, SOURCE, device="cpu")
        _use_cpu_draft_backend(server_args)
    else:
        original(server_args)
    spec = spec or _drafter_spec(server_args)  # a drafter path the handler resolved
    if spec is not None:
        _check_block_size(server_args, spec)


def _refuse_compact_verify_on_cpu() -> None:
    """DSPARK's compact ragged verify packs fewer tokens for some requests than others; the CPU
    attention backend's verify metadata assumes every request's whole window
    (intel_amx_backend.py, TARGET_VERIFY), so the first compact step would fail mid-request."""
    from sglang.srt.speculative.ragged_verify import RaggedVerifyMode, read_ragged_verify_mode

    if read_ragged_verify_mode() is RaggedVerifyMode.COMPACT:
        raise ValueError("SGLANG_RAGGED_VERIFY_MODE=compact does not run on CPU yet (the CPU "
                         "attention backend verifies whole windows); use cap-accept or static")


def _use_cpu_draft_backend(server_args) -> None:
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    requested = resolving_view(server_args).speculative_draft_attention_backend
    if requested is not None and requested != CPU_ATTENTION_BACKEND:
        logger.warning("sglang_dspark: draft attention backend %r does not run on CPU; using %r",
                       requested, CPU_ATTENTION_BACKEND)
        declare_resolution(server_args, SOURCE,
                           speculative_draft_attention_backend=CPU_ATTENTION_BACKEND)


def _drafter_spec(server_args) -> DrafterSpec | None:
    """The drafter validated against the target, or None while there is no local drafter."""
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    if cfg.speculative_draft_model_path is None:
        return None
    draft_path, target_path = Path(cfg.speculative_draft_model_path), Path(cfg.model_path)
    if not (draft_path / "config.json").is_file():
        # A hub id: SGLang downloads it later, and only its own checks apply.
        logger.info("sglang_dspark: %s is not a local checkpoint; drafter checks skipped", draft_path)
        return None
    local_target = target_path if (target_path / "config.json").is_file() else None
    return validate_drafter(draft_path, "dspark", local_target, selector=algorithm_flag)


def _check_block_size(server_args, spec: DrafterSpec) -> None:
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    gamma = int(cfg.speculative_num_draft_tokens) - 1
    try:
        check_draft_length(spec, gamma)
    except DrafterSpecError as exc:
        flag = cfg.speculative_dspark_block_size
        given = (f"--speculative-dspark-block-size {flag}" if flag is not None
                 else f"--speculative-num-draft-tokens {gamma + 1} (gamma + 1)")
        raise DrafterSpecError(f"{given}: {exc} (the flag counts drafted tokens, the anchor "
                               "excluded)") from None
    logger.info("sglang_dspark: %s drafts %d tokens per step (trained for %d), verify window %d",
                spec.path, gamma, spec.max_draft_tokens, gamma + 1)
