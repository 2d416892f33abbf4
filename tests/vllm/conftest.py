"""Fixtures for the vLLM plugin tests: the project's trained Qwen3 fixtures
(build/fixtures/qwen3/{target,dflash,lilicorr}) and the conformance suite's in-domain prompts.

Servers are started the conformance driver's way (tests/conformance/drivers/vllm.py), so these
tests and the suite run vLLM identically; run them from the repository root
(`.venvs/vllm/bin/python -m pytest tests/vllm`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.drivers.base import FIXTURES


def fixture_path(role: str) -> Path:
    path = FIXTURES / "qwen3" / role
    if not (path / "config.json").is_file():
        pytest.fail(f"missing fixture {path}: materialise the fixtures (ci/setup.sh fixtures)",
                    pytrace=False)
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
def in_domain_prompts() -> list[list[int]]:
    """Held-out in-domain prompts as token ids (the suite's "in_domain" set)."""
    from tests.conformance.prompts import prompt_set

    return [list(request.prompt_ids) for request in prompt_set("in_domain")]
