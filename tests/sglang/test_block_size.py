"""How --speculative-dspark-block-size resolves against the drafter's trained block, and the
CPU draft backend, checked on SGLang's own argument resolution (no model is loaded).

The drafter's config.json ``block_size`` is gamma, the tokens one block drafts; the flag counts
the same thing; SGLang's verify window (``speculative_num_draft_tokens``) is gamma + 1.
"""

from __future__ import annotations

import json

import pytest

from sglang_servers import fixture_dir, resolve


def _case(*flags: str) -> list[str]:
    return ["--model-path", str(fixture_dir("qwen3", "target")),
            "--speculative-draft-model-path", str(fixture_dir("qwen3", "dspark")), *flags]


@pytest.fixture(scope="module")
def trained() -> int:
    config = json.loads((fixture_dir("qwen3", "dspark") / "config.json").read_text())
    return config["dflash_config"]["block_size"]


def test_block_size_flag_counts_drafted_tokens(trained):
    (absent, lower, equal, above, zero), _ = resolve(
        [_case(), _case("--speculative-dspark-block-size", str(trained - 1)),
         _case("--speculative-dspark-block-size", str(trained)),
         _case("--speculative-dspark-block-size", str(trained + 1)),
         _case("--speculative-dspark-block-size", "0")])
    assert absent["num_draft_tokens"] == trained + 1  # the drafter's own block
    assert lower["num_draft_tokens"] == trained  # the flag may lower it
    assert equal["num_draft_tokens"] == trained + 1
    assert above["error_type"] == "DrafterSpecError"
    assert above["error"].startswith(f"--speculative-dspark-block-size {trained + 1}: ")
    assert f"ask for at most {trained}" in above["error"]
    assert "positive" in zero["error"]  # SGLang's own check
    assert all(r["device"] == "cpu" for r in (absent, lower, equal))


def test_cuda_draft_backend_maps_to_cpu_with_one_log_line():
    (mapped, default), log = resolve(
        [_case("--speculative-draft-attention-backend", "flashinfer"), _case()])
    assert mapped["draft_backend"] == "intel_amx"
    assert default["draft_backend"] is None  # unset: the draft uses the target's CPU backend
    notices = [ln for ln in log.splitlines() if "does not run on CPU" in ln]
    assert len(notices) == 1 and "'flashinfer'" in notices[0] and "'intel_amx'" in notices[0]


def test_compact_ragged_verify_is_refused_on_cpu_before_loading(monkeypatch):
    """Its first compact step would fail in the CPU attention backend, mid-request."""
    monkeypatch.setenv("SGLANG_RAGGED_VERIFY_MODE", "compact")
    (compact,), _ = resolve([_case()])
    assert compact["error_type"] == "ValueError"
    assert compact["error"].startswith("SGLANG_RAGGED_VERIFY_MODE=compact does not run on CPU")
    monkeypatch.setenv("SGLANG_RAGGED_VERIFY_MODE", "cap-accept")
    (cap_accept,), _ = resolve([_case()])
    assert "error" not in cap_accept, cap_accept
