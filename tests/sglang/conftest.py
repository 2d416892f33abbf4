"""Fixtures shared by the sglang_dspark tests (helpers live in sglang_servers.py)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sglang-logs")
