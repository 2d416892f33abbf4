"""llama-server's HTTP layer as pooling clients use it (patch 0009)."""

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
