"""A streaming OpenAI-compatible client, the same for every engine: output text, token count,
time to first text and to the last; and clients that walk away mid-stream."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field


@dataclass
class Streamed:
    text: str
    tokens: int
    ttft: float     # seconds to the first generated text
    seconds: float  # seconds to the last generated text
    # engine extras of the last chunk that carried them (llama-server's "timings")
    timings: dict = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens over the whole request (prefill included): engines stream several
        tokens per chunk, and may hold back the first text, so first-to-last text is no clock."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def stream(url: str, payload: dict, timeout: float = 600.0) -> Streamed:
    """POST a chat or completion request with stream=true; ``url`` ends with
    /v1/completions or /v1/chat/completions."""
    body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    first = last = None
    parts: list[str] = []
    tokens = 0
    timings: dict = {}
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            for choice in chunk.get("choices") or []:
                piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                if piece:
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
                    parts.append(piece)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            timings = chunk.get("timings") or timings
    if first is None:
        return Streamed("", tokens, 0.0, 0.0, timings)
    return Streamed("".join(parts), tokens, first - started, last - started, timings)


def abandon_streams(url: str, payloads: list[dict], chunks: int = 3, timeout: float = 120.0) -> int:
    """Start every streamed request at once, read ``chunks`` text chunks of each, then close the
    connection as a client that goes away would. Returns how many streams were cut while still
    generating (a stream that ended first was not abandoned)."""
    def cut(payload: dict) -> bool:
        body = {**payload, "stream": True}
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        seen = 0
        with urllib.request.urlopen(request, timeout=timeout) as response:
            for raw in response:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    return False
                if line.startswith("data:") and any(
                        c.get("text") for c in json.loads(line[5:]).get("choices") or []):
                    seen += 1
                    if seen == chunks:
                        return True  # leaving the with-block closes the socket mid-stream
        return False

    with ThreadPoolExecutor(len(payloads)) as pool:
        return sum(pool.map(cut, payloads))


class LiveStreams:
    """Streamed requests read in background threads until the server ends them or the
    connection drops: how a server's shutdown looks from its clients."""

    def __init__(self, url: str, payloads: list[dict], chunks: int = 3) -> None:
        self.url, self.payloads, self.chunks = url, payloads, chunks
        self.texts: list[list[str]] = [[] for _ in payloads]
        self._started = [threading.Event() for _ in payloads]
        self._threads = [threading.Thread(target=self._read, args=(i,), daemon=True)
                         for i in range(len(payloads))]

    def _read(self, index: int) -> None:
        body = {**self.payloads[index], "stream": True}
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                for raw in response:
                    line = raw.decode(errors="replace").strip()
                    if not line.startswith("data:") or line == "data: [DONE]":
                        continue
                    for choice in json.loads(line[5:]).get("choices") or []:
                        if choice.get("text"):
                            self.texts[index].append(choice["text"])
                    if len(self.texts[index]) >= self.chunks:
                        self._started[index].set()
        except (OSError, http.client.HTTPException, ValueError):
            pass  # the server went away mid-stream
        finally:
            self._started[index].set()

    def __enter__(self) -> "LiveStreams":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.join(0)

    def wait_started(self, timeout: float) -> bool:
        """Every stream has read ``chunks`` text chunks (or ended)."""
        deadline = time.time() + timeout
        return all(event.wait(max(0.0, deadline - time.time())) for event in self._started)

    def running(self) -> int:
        return sum(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float) -> int:
        """Wait for the streams to end; returns how many are still open."""
        deadline = time.time() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.time()))
        return self.running()
