"""The line protocol between an offline driver (offline.py) and its host process: the host
prints each reply as one JSON line behind REPLY, among the engine's own log lines. No imports
beyond the standard library: hosts run in the engines' environments."""

from __future__ import annotations

import json

REPLY = "@@conformance "


def reply(body: dict) -> None:
    print(REPLY + json.dumps(body), flush=True)
