"""DSPARK served by launch_server on CPU: lossless and really accepting, for each text target.

Every comparison runs the same prompts through a server without speculation (the reference)
and one with ``--speculative-algorithm DSPARK``, and checks token ids and SGLang's own
acceptance counters.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_servers import AL_FLOOR, Server, dspark_args, fixture_dir, generate

pytestmark = pytest.mark.slow

# In-domain for the fixtures: their targets are trained on CPython's standard library.
PROMPTS = [
    "def main(argv):\n    ",
    "import os\nimport sys\n\n",
    "class Config:\n    def __init__(self",
    "for i in range(10):\n",
    "if __name__ == '__main__':\n",
    "    def __repr__(self):\n        return",
]
# A batch of eight prompts of different lengths, sent as one request.
BATCH = [
    "x",
    "import re",
    "    return self.",
    "def _get(self, key, default=None):\n",
    "try:\n    import threading\nexcept ImportError:\n",
    "with open(path) as f:\n    for line in f:\n        ",
    "class Error(Exception):\n    \"\"\"Base class for exceptions in this module.\"\"\"\n    pass\n\n\n",
    "# Copyright 2001 Python Software Foundation.\n\"\"\"Utilities for parsing.\"\"\"\n\nimport os\n"
    "import sys\nfrom collections import namedtuple\n\n__all__ = [",
]
CHAT = [{"role": "user", "content": "Write a function that reads a file."}]
NEW_TOKENS = 64
TARGETS = ["qwen3", "lfm2"]


@pytest.fixture(scope="module", params=TARGETS)
def target(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def reference(target, server_logs) -> dict:
    """Everything the DSPARK server will be asked, answered by the target alone."""
    server = Server(["--model-path", str(fixture_dir(target, "target"))],
                    server_logs / f"{target}-reference.log").wait_ready()
    try:
        return {
            "single": [generate(server, p, NEW_TOKENS)[0]["output_ids"] for p in PROMPTS],
            "batch": [r["output_ids"] for r in generate(server, BATCH, NEW_TOKENS)],
            "completion": server.post("/v1/completions", {
                "model": "m", "prompt": PROMPTS[0], "max_tokens": NEW_TOKENS, "temperature": 0,
                "ignore_eos": True})["choices"][0]["text"],
            "chat": server.post("/v1/chat/completions", {
                "model": "m", "messages": CHAT, "max_tokens": NEW_TOKENS, "temperature": 0,
                "ignore_eos": True})["choices"][0]["message"]["content"],
        }
    finally:
        server.stop()


@pytest.fixture(scope="module")
def dspark(target, reference, server_logs):
    server = Server(dspark_args(target), server_logs / f"{target}-dspark.log").wait_ready()
    yield server
    server.stop()


def _spec(result: dict) -> dict:
    meta = result["meta_info"]
    assert meta.get("spec_verify_ct", 0) > 0, "no speculative verify step ran"
    return meta


def test_single_requests_equal_target_and_accept(target, reference, dspark):
    results = [generate(dspark, p, NEW_TOKENS)[0] for p in PROMPTS]
    for prompt, want, got in zip(PROMPTS, reference["single"], results):
        assert got["output_ids"] == want, f"{target}: output differs for {prompt!r}"
    metas = [_spec(r) for r in results]
    assert all(m["spec_num_proposed_drafts"] > 0 for m in metas)
    mean_al = statistics.mean(m["spec_accept_length"] for m in metas)
    print(f"{target}: acceptance length per prompt "
          f"{[round(m['spec_accept_length'], 2) for m in metas]}, mean {mean_al:.2f}")
    assert mean_al >= AL_FLOOR


def test_partial_acceptances_are_exercised(target, dspark):
    """Blocks accepted only in part are where a hybrid (LFM2) target must roll its conv state
    back; equality above is only meaningful for LFM2 if such blocks occurred."""
    gamma = dspark.get("/server_info")["internal_states"][0]["speculative_num_draft_tokens"] - 1
    histogram = [0] * (gamma + 1)  # verify steps by number of drafts accepted
    for prompt in PROMPTS:
        counts = _spec(generate(dspark, prompt, NEW_TOKENS)[0])["spec_correct_drafts_histogram"]
        assert len(counts) <= gamma + 1
        histogram = [a + b for a, b in zip(histogram, counts + [0] * (gamma + 1 - len(counts)))]
    print(f"{target}: drafts accepted per verify step {histogram}")
    assert sum(histogram[1:gamma]) > 0, f"no partially accepted block: histogram {histogram}"


def test_batch_of_mixed_lengths_equals_target(target, reference, dspark):
    results = generate(dspark, BATCH, NEW_TOKENS)
    assert [r["output_ids"] for r in results] == reference["batch"]
    assert sum(_spec(r)["spec_num_correct_drafts"] for r in results) > 0


def test_concurrent_requests_equal_target(target, reference, dspark):
    with ThreadPoolExecutor(max_workers=len(BATCH)) as pool:
        results = list(pool.map(lambda p: generate(dspark, p, NEW_TOKENS)[0], BATCH))
    assert [r["output_ids"] for r in results] == reference["batch"]
    assert sum(_spec(r)["spec_num_correct_drafts"] for r in results) > 0


def test_openai_completion_and_chat_equal_target(target, reference, dspark):
    completion = dspark.post("/v1/completions", {
        "model": "m", "prompt": PROMPTS[0], "max_tokens": NEW_TOKENS, "temperature": 0,
        "ignore_eos": True})
    assert completion["choices"][0]["text"] == reference["completion"]
    chat = dspark.post("/v1/chat/completions", {
        "model": "m", "messages": CHAT, "max_tokens": NEW_TOKENS, "temperature": 0,
        "ignore_eos": True})
    assert chat["choices"][0]["message"]["content"] == reference["chat"]


def test_server_info_reports_acceptance(target, dspark):
    generate(dspark, PROMPTS[1], NEW_TOKENS)  # the counters fold in at each decode log
    state = dspark.get("/server_info")["internal_states"][0]
    assert state["speculative_algorithm"] == "DSPARK"
    assert state["speculative_num_draft_tokens"] == 10
    assert state["avg_spec_accept_length"] > 1.0
