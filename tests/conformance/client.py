"""A streaming OpenAI-compatible client, the same for every engine: output text, token count,
time to first text and to the last; and clients that walk away mid-stream."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit


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


@dataclass(frozen=True)
class Cut:
    """A stream its client left mid-step: ``after_ms`` after its last chunk, a step taking
    ``step_ms`` (the median gap between its last chunks), and no chunk having come in between;
    (0, 0) for a client that left right after its chunks, without aiming (``at`` 0)."""
    after_ms: float
    step_ms: float


# a read that returns sooner found its chunk already buffered: sent with the one before it (an
# engine that streams a step's tokens one by one), or while the client was busy
WAITED_S = 2e-4


def abandon_streams(url: str, payloads: list[dict], chunks: int = 8, at: float = 0.5,
                    timeout: float = 120.0) -> list[Cut]:
    """Start every streamed request at once; each client waits for ``chunks`` text chunks
    (a chunk found already buffered does not count: its time is not its own), then leaves
    ``at`` of a step (the median gap between them) after the last, unless another comes first
    (then it counts that one in and waits on); with ``at`` 0, right after reading ``chunks``
    chunks. An engine streams a step's text as the step ends, so the client leaves while the
    engine runs its next step: ``at`` picks the part of it (a speculative step's verify forward,
    its draft sitting at one end). Returns the cuts; a stream that ended first was not cut."""
    parts = urlsplit(url)

    def cut(payload: dict) -> Cut | None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        connection.request("POST", parts.path, json.dumps({**payload, "stream": True}),
                           {"Content-Type": "application/json"})
        sock = connection.sock  # held: the wait for a chunk is its read timeout
        response = connection.getresponse()
        seen, last = 0, 0.0  # text chunks read, and when the last was
        waited_for: deque[float] = deque(maxlen=chunks)  # arrival times of chunks waited for
        step = None
        try:
            while True:
                if not at and seen >= chunks:
                    return Cut(0.0, 0.0)
                if at and len(waited_for) == chunks:
                    times = list(waited_for)
                    step = statistics.median(b - a for a, b in zip(times, times[1:]))
                    sock.settimeout(max(last + at * step - time.monotonic(), 1e-3))
                asked = time.monotonic()
                try:
                    raw = response.readline()
                except TimeoutError:
                    if step is None:
                        raise  # the server's silence, not ours
                    return Cut((time.monotonic() - last) * 1e3, step * 1e3)
                line = raw.decode(errors="replace").strip()
                if not raw or line == "data: [DONE]":
                    return None
                if line.startswith("data:") and any(
                        c.get("text") for c in json.loads(line[5:]).get("choices") or []):
                    seen, last = seen + 1, time.monotonic()
                    if last - asked >= WAITED_S:
                        waited_for.append(last)
        finally:  # closing the socket mid-stream is the client going away
            response.close()
            connection.close()
            sock.close()

    with ThreadPoolExecutor(len(payloads)) as pool:
        return [c for c in pool.map(cut, payloads) if c is not None]


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
