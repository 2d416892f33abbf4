"""SGLang's own surfaces with DSPARK: the OpenAI chat endpoint, /server_info, /metrics, and
sampled (temperature > 0) requests.

(Lossless outputs and acceptance on every axis: tests/conformance/test_sglang.py.)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conformance.drivers.base import http_json, http_text, prometheus_samples

pytestmark = pytest.mark.slow

CHAT = [{"role": "user", "content": "Write a function that reads a file."}]
NEW_TOKENS = 48


def test_chat_endpoint_serves_the_generate_tokens_with_speculation(vl_server):
    server, _ = vl_server
    chat = http_json(server.url + "/v1/chat/completions", {
        "model": "target", "messages": CHAT, "max_tokens": NEW_TOKENS, "temperature": 0,
        "ignore_eos": True,  # a full-length answer: short ones may end before any verify step
        "return_token_ids": True, "return_meta_info": True})
    choice = chat["choices"][0]
    direct = http_json(server.url + "/generate", {
        "input_ids": choice["prompt_token_ids"],
        "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}})
    assert choice["response_token_ids"] == direct["output_ids"]
    meta = choice["meta_info"]
    assert meta.get("spec_verify_ct", 0) > 0 and meta.get("spec_num_correct_drafts", 0) > 0, meta


def test_server_info_reports_dspark_and_its_acceptance(vl_server):
    server, _ = vl_server
    http_json(server.url + "/generate", {"text": "import os\nimport sys\n\n",
                                         "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0}})
    state = http_json(server.url + "/server_info")["internal_states"][0]
    assert state["speculative_algorithm"] == "DSPARK"
    assert state["speculative_num_draft_tokens"] == 10  # gamma 9 + the anchor
    assert state["avg_spec_accept_length"] > 1.0


def test_metrics_report_acceptance_length(vl_server):
    """The gauge holds the latest decode step's acceptance (the server logs every step), and a
    request's last step may accept nothing (its block is cut at max_new_tokens): read it while
    the request runs."""
    server, _ = vl_server
    values: list[float] = []
    with ThreadPoolExecutor(1) as pool:
        request = pool.submit(http_json, server.url + "/generate", {
            "text": "def main(argv):\n    ",
            "sampling_params": {"max_new_tokens": 4 * NEW_TOKENS, "temperature": 0, "ignore_eos": True}})
        while not request.done():
            values += [value for name, _, value in prometheus_samples(server.url)
                       if name == "sglang:spec_accept_length"]
        request.result()
    assert values and max(values) > 1.0, values


def test_sampled_requests_are_served_and_greedy_still_matches(qwen3_server):
    """A temperature > 0 request takes DSPARK's rejection-sampling verify (on CPU the plugin's
    plain-torch sampler, sglang_dspark/reject_sampling.py); the server stays healthy and a
    greedy request afterwards returns what it returned before. (Qwen3 target: the sampled
    verify does not depend on the model; the Qwen3 fixture is the one every set-up has.)"""
    server = qwen3_server
    greedy = {"text": "class Parser:\n    def __init__(self", "sampling_params": {
        "max_new_tokens": NEW_TOKENS, "temperature": 0}}
    before = http_json(server.url + "/generate", greedy)
    for prompt in ("def read_config(path):\n    ", "import os\n\n\ndef walk(root):\n"):
        sampled = http_json(server.url + "/generate", {
            "text": prompt, "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0.8}})
        meta = sampled["meta_info"]
        assert len(sampled["output_ids"]) > 0 and meta["spec_verify_ct"] > 0, meta
    # A sampled and a greedy request in one batch: the mixed accept path.
    with ThreadPoolExecutor(2) as pool:
        mixed = list(pool.map(lambda payload: http_json(server.url + "/generate", payload), [
            {"text": "def read_config(path):\n    ",
             "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0.8}}, greedy]))
    assert all(len(out["output_ids"]) > 0 for out in mixed)
    http_text(server.url + "/health")  # raises unless 200
    after = http_json(server.url + "/generate", greedy)
    assert after["output_ids"] == before["output_ids"]
