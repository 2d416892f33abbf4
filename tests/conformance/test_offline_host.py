"""The offline drivers' reply channel (no engine): replies reach the driver whole while the
host's stdout carries anything, and a host that dies is reported, not waited on. This module is
also the host under test: `python -m tests.conformance.test_offline_host`."""

from __future__ import annotations

import json
import sys

import pytest

from .drivers.base import BASELINE
from .drivers.host_protocol import reply
from .drivers.offline import OfflineEngine

def host() -> None:
    """Echoes each request, after writing a log line cut in two around it, as engine worker
    processes do on the shared stdout."""
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("exit"):
            sys.exit(3)
        print("a log line without its end", end="", flush=True)
        reply({"echo": request, "padding": "x" * 10000})
        print(" ...and its end", flush=True)


def engine(name: str) -> OfflineEngine:
    return OfflineEngine(name, sys.executable, __name__, {}, BASELINE, env={}, startup_timeout=60)


def test_replies_arrive_whole_beside_log_output():
    with engine("offline-host-echo") as host_process:
        for i in range(20):
            assert host_process.request({"i": i}, timeout=30)["echo"] == {"i": i}
    assert "a log line without its end ...and its end" in host_process.log_path.read_text()


def test_a_host_that_exits_is_reported_at_once():
    with engine("offline-host-exit") as host_process:
        with pytest.raises(RuntimeError, match="offline-host-exit exited"):
            host_process.request({"exit": True}, timeout=30)


if __name__ == "__main__":
    host()
