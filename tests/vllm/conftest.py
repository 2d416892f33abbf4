"""Fixtures for the vLLM tests: the checkpoints, and where reports go.

The checkpoints are the project's trained Qwen3 fixtures (build/fixtures/qwen3/{target,dflash,
lilicorr}); in-domain prompts must reach an acceptance length of 3 on them. Setting
VLLM_LILICORR_FIXTURES runs the same tests on untrained stand-ins of the same layout: every
comparison still demands drafts, but the acceptance floors are skipped (reported as skipped).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_server import REPORTS, ROOT

FIXTURES = Path(os.environ.get("VLLM_LILICORR_FIXTURES", ROOT / "build/fixtures/qwen3"))
IN_DOMAIN_FLOOR = 3.0


def fixture_path(role: str) -> Path:
    path = FIXTURES / role
    if not (path / "config.json").is_file():
        pytest.fail(f"missing fixture {path}: build the fixtures (ci/setup.sh) or set "
                    "VLLM_LILICORR_FIXTURES", pytrace=False)
    return path


@pytest.fixture(scope="session")
def target() -> Path:
    return fixture_path("target")


@pytest.fixture(scope="session")
def dflash() -> Path:
    return fixture_path("dflash")


@pytest.fixture(scope="session")
def lilicorr() -> Path:
    return fixture_path("lilicorr")


@pytest.fixture(scope="session")
def trained_floor() -> float | None:
    """The in-domain acceptance-length floor of the trained fixtures, None for stand-ins."""
    return None if "VLLM_LILICORR_FIXTURES" in os.environ else IN_DOMAIN_FLOOR


@pytest.fixture(scope="session")
def reports() -> Path:
    REPORTS.mkdir(parents=True, exist_ok=True)
    return REPORTS
