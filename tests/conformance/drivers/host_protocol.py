"""The protocol between an offline driver (offline.py) and its host process: requests come as
JSON lines on the host's stdin, replies go as JSON lines to a pipe of their own, whose file
descriptor the driver names in REPLY_FD. The engine's logs keep stdout: an engine's worker
processes write there too, and a reply among their lines could be split or joined to one.
No imports beyond the standard library: hosts run in the engines' environments."""

from __future__ import annotations

import functools
import json
import os

REPLY_FD = "CONFORMANCE_REPLY_FD"


@functools.cache
def _replies():
    fd = int(os.environ[REPLY_FD])
    os.set_inheritable(fd, False)  # the engine's subprocesses have no business with it
    return os.fdopen(fd, "w")


def reply(body: dict) -> None:
    channel = _replies()
    channel.write(json.dumps(body) + "\n")
    channel.flush()
