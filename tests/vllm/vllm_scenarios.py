"""The request scenarios every vLLM server in the tests is driven through.

Each scenario sends its requests to one server and returns the token ids it got back, plus
vLLM's speculative counters over exactly those requests. A speculative server passes a
scenario when its token ids equal the plain server's (greedy, fp32) and drafts were made.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from vllm_server import SpecCounts, VllmServer

# In-domain for the fixtures (trained on CPython's standard library sources).
PROMPTS = [
    "import os\nimport sys\n\n\ndef main():\n",
    "class Queue:\n    def __init__(self, maxsize=0):\n        self.maxsize = maxsize\n",
    "    def __repr__(self):\n        return ",
    "def _check_arg(name, value):\n    if not isinstance(value, str):\n        raise TypeError(",
    "        for i in range(len(self.",
    "# Copyright (C) 2001 Python Software Foundation\n\n\"\"\"",
    "    try:\n        import _thread\n    except ImportError:\n",
    "    @property\n    def name(self):\n        \"\"\"Return the",
]
CHATS = [[{"role": "user", "content": "def parse(line):"}],
         [{"role": "system", "content": "You write Python."},
          {"role": "user", "content": "class Reader:\n    def read(self"}]]
# ~430 tokens shared by the prefix-caching requests: several KV blocks (128 tokens on CPU), as
# DFlash/EAGLE-style drafting gives back the last matched block (kv_cache_coordinator.py).
PREFIX = "".join(PROMPTS) * 3
LONG_PROMPT = "".join(PROMPTS) * 5  # ~700 tokens: chunked at --max-num-batched-tokens 256


@dataclass
class Outcome:
    token_ids: list[list[int]]
    counts: SpecCounts
    seconds: float
    extra: dict = field(default_factory=dict)


def single(server: VllmServer) -> list[list[int]]:
    return [server.complete(p)[0] for p in PROMPTS]


def chat(server: VllmServer) -> list[list[int]]:
    return [server.chat(m) for m in CHATS]


def batch8(server: VllmServer) -> list[list[int]]:
    """One request carrying 8 prompts of different lengths."""
    prompts = [p * (1 + i % 3) for i, p in enumerate(PROMPTS)]
    return server.complete(prompts, max_tokens=40)


def concurrent(server: VllmServer) -> list[list[int]]:
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: server.complete(p, max_tokens=40)[0], PROMPTS))


def shared_prefix(server: VllmServer) -> list[list[int]]:
    """Sequential requests sharing a long prefix, so later ones start from cached blocks."""
    return [server.complete(PREFIX + p, max_tokens=32)[0] for p in PROMPTS[4:]]


def long_prompt(server: VllmServer) -> list[list[int]]:
    return server.complete(LONG_PROMPT, max_tokens=40)


def short_max_tokens(server: VllmServer) -> list[list[int]]:
    """max_tokens ending inside a drafted block must not overshoot."""
    return [server.complete(PROMPTS[i], max_tokens=n)[0] for i, n in enumerate((1, 3, 9, 12))]


def first_divergence(expected: list[list[int]], actual: list[list[int]]):
    """(request, position) of the first differing token, or None."""
    assert len(expected) == len(actual)
    for request, (a, b) in enumerate(zip(expected, actual)):
        for position in range(max(len(a), len(b))):
            if position >= len(a) or position >= len(b) or a[position] != b[position]:
                return request, position
    return None


SCENARIOS = {f.__name__: f for f in (single, chat, batch8, concurrent, shared_prefix,
                                     long_prompt, short_max_tokens)}


def run(server: VllmServer, names=tuple(SCENARIOS)) -> dict[str, Outcome]:
    outcomes = {}
    for name in names:
        before = server.spec_counts()
        start = time.monotonic()
        token_ids = SCENARIOS[name](server)
        seconds = time.monotonic() - start
        outcomes[name] = Outcome(token_ids, server.spec_counts() - before, seconds)
    return outcomes
