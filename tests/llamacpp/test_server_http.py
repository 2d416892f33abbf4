"""llama-server's HTTP layer as pooling clients and process supervisors use it (patches 0009, 0010)."""

from __future__ import annotations

import http.client
import json

from .conftest import llama_server


def test_a_streamed_response_keeps_its_connection_open(gguf):
    """Two streamed completions on one keep-alive connection. Upstream closed the connection
    after every stream (its content provider reported the finished stream as a failed write),
    so clients that pool connections (aiohttp in `vllm bench serve`) had their next request
    fail with "Server disconnected"."""
    with llama_server("keep-alive", "-m", gguf("qwen3", "target")) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        sockets = []
        for prompt in ("def f(x):", "def g(x):"):
            connection.request("POST", "/v1/completions", json.dumps(
                {"prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True}),
                {"Content-Type": "application/json"})
            sockets.append(connection.sock)  # http.client opens a new one if it saw a close
            response = connection.getresponse()
            body = response.read().decode()
            assert response.status == 200 and body.rstrip().endswith("data: [DONE]"), body[-300:]
            assert response.getheader("Connection", "").lower() != "close"
        connection.close()
        assert sockets[0] is sockets[1], "llama-server closed the connection after a stream"


def test_sigterm_ends_the_running_streams(gguf):
    """SIGTERM while a completion streams: the stream ends and the server exits at once (patch
    0010). Upstream the streaming handler only noticed the shutdown at its next SSE ping, 30 s
    later, and the server waited for it."""
    with llama_server("sigterm", "-m", gguf("qwen3", "target")) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        connection.request("POST", "/v1/completions", json.dumps(
            {"prompt": "def f(x):", "max_tokens": 4000, "temperature": 0, "stream": True,
             "ignore_eos": True}), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.readline().startswith(b"data: "), "the stream did not start"
        seconds = server.terminate(grace=20)
        try:
            rest = response.read()
        except http.client.IncompleteRead as cut:  # the server closed the stream mid-chunk
            rest = cut.partial
        connection.close()
    assert seconds < 5, f"llama-server took {seconds:.1f} s to exit with a stream open"
    assert b"[DONE]" not in rest, "the stream ran to its end: it was not running at SIGTERM"
