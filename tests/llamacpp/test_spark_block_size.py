"""--spark-block-size and the default drafted length of DFlash / DSpark drafts.

llama.cpp's own unit tests for the flag (tests/test-arg-parser.cpp, extended by the series) run
first; the rest checks the server: the flag and its environment variable set the drafted
length, a value above the trained block is one clear error before any model loads, and
without a length the drafter drafts the block it was trained for.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conformance.drivers.llamacpp import LLAMA_SERVER

from .conftest import complete, llama_server, refusal, refused


def trained_block(hf_dir: Path) -> int:
    config = json.loads((hf_dir / "config.json").read_text())
    return (config.get("dflash_config") or {}).get("block_size", config.get("block_size"))


def drafted_length(log: str) -> int:
    return int(re.search(r"common_speculative_impl_draft_dflash: - n_max=(\d+)", log).group(1))


def test_llama_arg_parser_unit_tests(tmp_path):
    """tests/test-arg-parser.cpp, with the series' --spark-block-size cases. Its last section
    fetches http://ggml.ai/, which this machine cannot reach; everything before it must pass."""
    run = subprocess.run([str(LLAMA_SERVER.parent / "test-arg-parser")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    output = run.stdout + run.stderr
    assert "test the drafted length of DFlash / DSpark drafts" in output
    # the sections run in order and a failed assert aborts: reaching the download section means
    # every argument-parsing check passed
    assert "test-arg-parser: test download functions" in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("role", ["dflash", "lilicorr", "dspark"])
def test_default_is_the_trained_block(role, gguf, hf_fixture):
    with llama_server(f"default-length-{role}", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", role)) as server:
        log = server.log_path.read_text()
    block = trained_block(hf_fixture("qwen3", role))
    # DSpark samples from the anchor: its whole block is drafted; the others draft after it
    assert drafted_length(log) == (block if role == "dspark" else block - 1)


@pytest.mark.slow
def test_spec_draft_n_max_still_wins(gguf):
    with llama_server("n-max-3", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", "dflash"),
                      "--spec-draft-n-max", "3") as server:
        assert drafted_length(server.log_path.read_text()) == 3


@pytest.mark.slow
def test_flag_and_environment_variable(gguf):
    with llama_server("spark-5", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", "dspark"),
                      "--spark-block-size", "5") as server:
        assert drafted_length(server.log_path.read_text()) == 5
        body = complete(server, "def main():\n", 24)
        assert body["timings"].get("draft_n", 0) > 0
    with llama_server("spark-env-4", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", "dspark"),
                      env={"LLAMA_ARG_SPARK_BLOCK_SIZE": "4"}) as server:
        assert drafted_length(server.log_path.read_text()) == 4


@pytest.mark.slow
@pytest.mark.parametrize("role", ["dflash", "lilicorr", "dspark"])
def test_above_the_trained_block_is_an_error(role, gguf, hf_fixture, reliability):
    block = trained_block(hf_fixture("qwen3", role))
    limit = block if role == "dspark" else block - 1
    code, log = refused(f"too-long-{role}", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", role),
                        "--spark-block-size", str(limit + 1))
    assert code == 1
    assert (f"--spark-block-size {limit + 1} exceeds the block the draft model was trained for" in log
            and f"use --spark-block-size {limit} or less" in log), log[-2000:]
    assert "loading model" not in log  # refused before any model is loaded
    reliability("llamacpp", f"--spark-block-size above the {role} drafter's trained block",
                refusal(code, log, "exceeds the block"))


@pytest.mark.slow
@pytest.mark.parametrize("draft", [None, ("qwen3", "target")])
def test_needs_a_block_drafter(draft, gguf, reliability):
    args = ["-md", gguf(*draft), "--spec-type", "draft-simple"] if draft else []
    code, log = refused("spark-no-block-drafter", "-m", gguf("qwen3", "target"), *args, "--spark-block-size", "4")
    assert code == 1
    assert "--spark-block-size needs a DFlash or DSpark draft model" in log
    reliability("llamacpp", "--spark-block-size with " + ("a plain draft model" if draft else "no draft model"),
                refusal(code, log, "--spark-block-size needs"))
