"""Shared pieces of the llama.cpp tests: the fixtures as GGUF (ci/setup/gguf.sh converts them),
and llama-server processes started the way the conformance driver starts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.drivers.base import BASELINE, FIXTURES, EngineProcess, free_port, http_json
from tests.conformance.drivers.llamacpp import COMMON_ARGS, LLAMA_SERVER, PORTS, gguf as gguf_path


def llama_server(name: str, *args: str | Path, env: dict[str, str] | None = None) -> EngineProcess:
    """llama-server with the conformance driver's common arguments (f32 KV caches, no flash
    attention, 4 slots, --metrics) and ARGS; use it as a context manager."""
    port = free_port(PORTS)
    argv = [str(LLAMA_SERVER), *map(str, args), "--host", "127.0.0.1", "--port", str(port), *COMMON_ARGS]
    return EngineProcess(f"llamacpp-test-{name}", argv, port, "/health", BASELINE, env=env,
                         startup_timeout=120)


def refused(name: str, *args: str | Path) -> tuple[int, str]:
    """(exit code, log) of a llama-server that must stop before serving."""
    server = llama_server(name, *args)
    with pytest.raises(RuntimeError, match="before serving"):
        with server:
            pass
    return server.process.returncode, server.log_path.read_text(errors="replace")


def refusal(code: int, log: str, fragment: str) -> str:
    """What the user saw: the exit code and the log line holding ``fragment`` (for the
    reliability table)."""
    line = next((ln for ln in log.splitlines() if fragment in ln), "")
    return f"exit {code} before serving: {line.split(' E ', 1)[-1].strip()}"


def complete(server: EngineProcess, prompt, n_predict: int, **extra) -> dict:
    """A greedy /completion with the generated token ids."""
    return http_json(server.url + "/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0,
                                                  "top_k": 1, "return_tokens": True, **extra})


@pytest.fixture(scope="session")
def gguf():
    """gguf("qwen3", "lilicorr") -> build/fixtures/gguf/qwen3-lilicorr.gguf."""
    if not LLAMA_SERVER.is_file():
        pytest.fail(f"{LLAMA_SERVER} is missing: run ci/setup.sh", pytrace=False)

    def path(family: str, role: str) -> Path:
        file = gguf_path(family, role)
        if not file.is_file():
            pytest.fail(f"missing {file}: run ci/setup.sh (ci/setup/gguf.sh converts the fixtures)",
                        pytrace=False)
        return file
    return path


@pytest.fixture(scope="session")
def hf_fixture():
    """hf_fixture("qwen3", "lilicorr") -> build/fixtures/qwen3/lilicorr (Hugging Face format)."""
    def path(family: str, role: str) -> Path:
        folder = FIXTURES / family / role
        if not (folder / "config.json").is_file():
            pytest.fail(f"missing fixture {folder}: run ci/setup.sh", pytrace=False)
        return folder
    return path
