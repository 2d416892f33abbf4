"""Real ``python -m sglang.launch_server`` processes on CPU, for the sglang_dspark tests.

Run with ``.venvs/sglang/bin/python -m pytest tests/sglang``. Models come from
``$BLOCKDRAFT_FIXTURES`` (default ``build/fixtures``), laid out ``<target>/{target,dspark}``.
``SGLANG_DSPARK_AL_FLOOR`` (default 3.0) is the acceptance length the in-domain prompts must
reach; only random-weight scratch models justify a lower one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("BLOCKDRAFT_FIXTURES", ROOT / "build" / "fixtures"))
AL_FLOOR = float(os.environ.get("SGLANG_DSPARK_AL_FLOOR", "3.0"))
# Ports 8200-8299 belong to these tests; each server takes the next one.
_ports = iter(range(8210, 8300))

# Controlled numerics: fp32 weights and activations, and fp32 LFM2 conv states (SGLang keeps
# them in bf16 by default, which rounds decode and verify differently).
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32"}
BASE_ARGS = ["--device", "cpu", "--dtype", "float32", "--max-total-tokens", "8192",
             "--decode-log-interval", "1", "--random-seed", "0"]


def fixture_dir(target: str, role: str) -> Path:
    path = FIXTURES / target / role
    if not (path / "config.json").is_file():
        pytest.skip(f"fixture {path} is not built (python -m blockdraft.fixtures)")
    return path


class Server:
    """One launch_server process in its own session; stop() ends all of its processes."""

    def __init__(self, args: list[str], log: Path):
        self.port = next(_ports)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, **CPU_ENV}
        cmd = [sys.executable, "-m", "sglang.launch_server", *BASE_ARGS,
               "--host", "127.0.0.1", "--port", str(self.port), *args]
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 600) -> "Server":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(2)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def post(self, path: str, payload: dict, timeout: float = 900) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        try:  # children SGLang spawned stay in the session after the launcher exits
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def dspark_args(target: str, block_size: int | None = 9) -> list[str]:
    args = ["--model-path", str(fixture_dir(target, "target")),
            "--speculative-algorithm", "DSPARK",
            "--speculative-draft-model-path", str(fixture_dir(target, "dspark")),
            # What users pass on CUDA; on CPU the plugin maps it to the CPU backend.
            "--speculative-draft-attention-backend", "flashinfer"]
    if block_size is not None:
        args += ["--speculative-dspark-block-size", str(block_size)]
    return args


def generate(server: Server, texts, max_new_tokens: int, **extra) -> list[dict]:
    """Greedy /generate for one text or a batch; returns one result per text."""
    payload = {"text": texts, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                 "ignore_eos": True}, **extra}
    result = server.post("/generate", payload)
    return result if isinstance(result, list) else [result]
