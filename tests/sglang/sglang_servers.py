"""Helpers of the sglang_dspark tests: fixtures, DSPARK servers (started as the conformance
suite starts them), and SGLang's own server-argument resolution in a fresh interpreter.

Run from the repository root: ``.venvs/sglang/bin/python -m pytest tests/sglang``. Lossless
outputs and acceptance on every axis are the conformance suite's job
(``tests/conformance/test_sglang.py``); these tests cover what is specific to the plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.drivers.base import FIXTURES, REPO, EngineProcess, free_port
from tests.conformance.drivers.sglang import COMMON_ARGS, ENV, PORTS, SglangDriver, server_args

ROOT = REPO
DSPARK = SglangDriver.methods[0]


def fixture_dir(family: str, role: str) -> Path:
    path = FIXTURES / family / role
    if not (path / "config.json").is_file():
        pytest.fail(f"missing fixture {path}: materialise the fixtures (ci/setup.sh fixtures)",
                    pytrace=False)
    return path


def dspark_server(name: str, family: str, extra_args: list[str] = (),
                  extra_env: dict[str, str] | None = None) -> EngineProcess:
    """launch_server with DSPARK on a fixture target, as the conformance driver starts it."""
    fixture_dir(family, "target")
    port = free_port(PORTS)
    argv = [sys.executable, "-m", "sglang.launch_server",
            *server_args("default", family, DSPARK, port), *extra_args]
    return EngineProcess(name, argv, port, "/health", DSPARK, {**ENV, **(extra_env or {})})


RESOLVE = r"""
import json, sys
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.arg_groups.overrides import resolved_view
from sglang.srt.server_args import prepare_server_args
out = []
for argv in json.loads(sys.argv[1]):
    args = prepare_server_args(argv)
    try:
        args.resolve_once()
    except Exception as exc:
        out.append({"error_type": type(exc).__name__, "error": str(exc)})
        continue
    view = resolved_view(args)
    out.append({"num_draft_tokens": view.speculative_num_draft_tokens,
                "draft_backend": view.speculative_draft_attention_backend,
                "device": view.device})
print("RESULT " + json.dumps(out))
"""


def resolve(cases: list[list[str]]) -> tuple[list[dict], str]:
    """SGLang's argument resolution (plugins loaded, no model loaded) of each DSPARK command
    line, on CPU: each case's resolved values or its error; and the log."""
    base = ["--device", "cpu", "--speculative-algorithm", "DSPARK"]
    result = subprocess.run(
        [sys.executable, "-c", RESOLVE, json.dumps([base + case for case in cases])],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **ENV})
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    return json.loads(lines[0][len("RESULT "):]), result.stderr


def launch(*args: str) -> subprocess.CompletedProcess:
    """A launch_server run expected to stop before serving."""
    cmd = [sys.executable, "-m", "sglang.launch_server", *COMMON_ARGS,
           "--port", str(free_port(PORTS)), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, **ENV})
