"""`vllm serve TARGET --speculative-config '{"method":"lilicorr","model":DRAFTER}'` at vLLM's
defaults (torch.compile on, draft length from the checkpoint), and vLLM's own reporting surfaces.

The conformance suite (tests/conformance/test_vllm.py) compares outputs scenario by scenario with
eager servers; this is the one server here that compiles. It serves a single request, then a
growing batch: a compiled lattice head used to crash the CPU worker there. /metrics, the chat
endpoint, `vllm bench serve` and the "SpecDecoding metrics" log line must count our drafts.
"""

from __future__ import annotations

import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conformance.drivers.base import http_json
from tests.conformance.drivers.vllm import (SERVED_NAME, VLLM, completion, serve, spec_counters,
                                            speculative_args)

pytestmark = pytest.mark.slow
NUM_SLOTS = 7  # block_size - 1 of the fixtures' drafters: LiLiCorr's default draft length
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def compiled(target, lilicorr):
    with serve("test-lilicorr-compiled", target, *speculative_args("lilicorr", lilicorr),
               eager=False) as engine:
        yield engine


def test_compiled_head_serves_one_request_then_a_growing_batch(compiled, in_domain_prompts):
    first = completion(compiled, [in_domain_prompts[0]], MAX_TOKENS, ignore_eos=True)  # batch 1
    with ThreadPoolExecutor(8) as pool:  # then up to 8 requests per draft step
        batch = list(pool.map(lambda p: completion(compiled, [p], MAX_TOKENS, ignore_eos=True)[0],
                              in_domain_prompts * 2))
    assert [len(c["token_ids"]) for c in first + batch] == [MAX_TOKENS] * 9
    counters = spec_counters(compiled)
    assert 0 < counters.accepted_tokens <= counters.draft_tokens <= NUM_SLOTS * counters.drafts
    log = compiled.log_path.read_text(errors="replace")
    assert f"LiLiCorr drafting on the V1 model runner: {NUM_SLOTS} slots x top-4 candidates" in log


def test_chat_endpoint_drafts(compiled):
    before = spec_counters(compiled)
    body = http_json(compiled.url + "/v1/chat/completions", {
        "model": SERVED_NAME, "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "messages": [{"role": "user", "content": "def parse(line):"}]})
    assert body["choices"][0]["message"]["content"]
    assert (spec_counters(compiled) - before).accepted_tokens > 0


def test_vllm_bench_serve_reports_our_drafts(compiled, target):
    result = subprocess.run(
        [str(VLLM), "bench", "serve", "--backend", "vllm", "--base-url", compiled.url,
         "--model", SERVED_NAME, "--tokenizer", str(target), "--dataset-name", "random",
         "--random-input-len", "32", "--random-output-len", "32", "--num-prompts", "4",
         "--max-concurrency", "1", "--temperature", "0", "--ignore-eos", "--seed", "0"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    section = result.stdout.split("Speculative Decoding", 1)[1]
    drafts = int(re.search(r"Drafts:\s+(\d+)", section).group(1))
    draft_tokens = int(re.search(r"Draft tokens:\s+(\d+)", section).group(1))
    assert drafts > 0 and 0 < draft_tokens <= NUM_SLOTS * drafts


def test_spec_decoding_log_line_counts_our_drafts(compiled):
    """vLLM logs its speculative statistics every 10 s after drafts were made."""
    pattern = re.compile(r"SpecDecoding metrics: .*?Mean acceptance length: ([\d.]+)")
    for _ in range(30):  # the line comes at the next 10 s tick at the latest
        lengths = pattern.findall(compiled.log_path.read_text(errors="replace"))
        if lengths:
            break
        time.sleep(1)
    assert lengths, "no SpecDecoding metrics line in the server log"
    assert max(float(length) for length in lengths) > 1.0
