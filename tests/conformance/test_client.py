"""The client that walks away mid-stream, against a local SSE server (no engine)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .client import LiveStreams, abandon_streams


def sse_server(chunks: int, dies_after: int | None = None):
    """A server streaming ``chunks`` completion chunks per request (or dropping the connection
    after ``dies_after`` of them, as a server that exits); it records, per request, whether the
    client was still there when it finished."""
    outcomes: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for i in range(chunks):
                    if i == dies_after:
                        outcomes.append("died")
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    chunk = {"choices": [{"text": f"t{i}"}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(0.02)
                self.wfile.write(b"data: [DONE]\n\n")
                outcomes.append("finished")
            except (BrokenPipeError, ConnectionResetError):
                outcomes.append("client left")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, outcomes


def test_streams_are_cut_mid_generation():
    server, outcomes = sse_server(chunks=200)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/completions"
        cuts = abandon_streams(url, [{"prompt": "a"}, {"prompt": "b"}])
        assert len(cuts) == 2
        for cut in cuts:  # half a 20 ms step after a chunk, before the next one
            assert 15 <= cut.step_ms <= 30 and 0.5 * cut.step_ms <= cut.after_ms < cut.step_ms
        deadline = time.time() + 10
        while len(outcomes) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert outcomes == ["client left", "client left"]
    finally:
        server.shutdown()


def test_a_stream_that_ends_first_is_not_counted():
    server, outcomes = sse_server(chunks=2)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/completions"
        assert abandon_streams(url, [{"prompt": "a"}]) == []
    finally:
        server.shutdown()


def test_live_streams_keep_what_arrived_before_the_server_went_away():
    """A server that dies mid-stream (no [DONE]): each stream ends with the text it had."""
    server, outcomes = sse_server(chunks=400, dies_after=5)
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/completions"
        with LiveStreams(url, [{"prompt": "a"}, {"prompt": "b"}], chunks=3) as streams:
            assert streams.wait_started(10)
            assert streams.join(10) == 0
        assert streams.texts == [[f"t{i}" for i in range(5)]] * 2 and outcomes == ["died"] * 2
    finally:
        server.shutdown()
