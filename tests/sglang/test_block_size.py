"""How --speculative-dspark-block-size resolves against the drafter's trained block, and the
CPU draft backend, checked on SGLang's own argument resolution (no model is loaded).

The drafter's config.json ``block_size`` is gamma, the tokens one block drafts; the flag counts
the same thing; SGLang's verify window (``speculative_num_draft_tokens``) is gamma + 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sglang_servers import CPU_ENV, ROOT, fixture_dir

RESOLVE = r"""
import json, sys
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.server_args import prepare_server_args
target, draft, flags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = []
for extra in flags:
    args = prepare_server_args(["--model-path", target, "--device", "cpu",
                                "--speculative-algorithm", "DSPARK",
                                "--speculative-draft-model-path", draft, *extra])
    try:
        args.resolve_once()
    except ValueError as exc:
        out.append({"error": str(exc)})
        continue
    view = resolved_view(args)
    out.append({"num_draft_tokens": view.speculative_num_draft_tokens,
                "draft_backend": view.speculative_draft_attention_backend,
                "device": view.device})
print("RESULT " + json.dumps(out))
"""


def _resolve(flags: list[list[str]]) -> tuple[list[dict], str]:
    draft = fixture_dir("qwen3", "dspark")
    result = subprocess.run(
        [sys.executable, "-c", RESOLVE, str(fixture_dir("qwen3", "target")), str(draft),
         json.dumps(flags)], capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, **CPU_ENV})
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    return json.loads(lines[0][len("RESULT "):]), result.stderr


@pytest.fixture(scope="module")
def trained() -> int:
    config = json.loads((fixture_dir("qwen3", "dspark") / "config.json").read_text())
    return config["dflash_config"]["block_size"]


def test_block_size_flag_counts_drafted_tokens(trained):
    (absent, lower, equal, above, zero), log = _resolve(
        [[], ["--speculative-dspark-block-size", str(trained - 1)],
         ["--speculative-dspark-block-size", str(trained)],
         ["--speculative-dspark-block-size", str(trained + 1)],
         ["--speculative-dspark-block-size", "0"]])
    assert absent["num_draft_tokens"] == trained + 1  # the drafter's own block
    assert lower["num_draft_tokens"] == trained  # the flag may lower it
    assert equal["num_draft_tokens"] == trained + 1
    assert f"ask for at most {trained}" in above["error"]
    assert "positive" in zero["error"]  # SGLang's own check
    assert all(r.get("device", "cpu") == "cpu" for r in (absent, lower, equal))


def test_cuda_draft_backend_maps_to_cpu_with_one_log_line():
    (mapped, default), log = _resolve(
        [["--speculative-draft-attention-backend", "flashinfer"], []])
    assert mapped["draft_backend"] == "intel_amx"
    assert default["draft_backend"] is None  # unset: the draft uses the target's CPU backend
    notices = [ln for ln in log.splitlines() if "does not run on CPU" in ln]
    assert len(notices) == 1 and "'flashinfer'" in notices[0] and "'intel_amx'" in notices[0]
