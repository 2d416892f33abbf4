"""A `vllm serve` process for the tests: start, query (OpenAI API, /metrics), stop by pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports" / "vllm"  # server logs and per-case records
PORTS = range(8100, 8200)  # this area's port range
VLLM = str(Path(sys.executable).with_name("vllm"))
# fp32 and small, so greedy comparisons are exact and a run fits the 2-core machine.
COMMON_ARGS = ["--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "8",
               "--max-num-batched-tokens", "256", "--seed", "0", "--enable-prefix-caching"]
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port in 8100-8199")


@dataclass
class SpecCounts:
    drafts: float
    draft_tokens: float
    accepted: float

    def __sub__(self, other: "SpecCounts") -> "SpecCounts":
        return SpecCounts(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                          self.accepted - other.accepted)

    @property
    def acceptance_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted tokens per draft."""
        return 1.0 + self.accepted / self.drafts if self.drafts else float("nan")


class VllmServer:
    def __init__(self, model: Path, log: Path, *args: str, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.model = str(model)
        command = [VLLM, "serve", self.model, "--port", str(self.port), *COMMON_ARGS, *args]
        environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                       **(env or {})}
        with open(log, "w") as out:
            out.write(" ".join(command) + "\n")
            out.flush()
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            env=environment, start_new_session=True)

    def wait_ready(self, timeout: float = 900) -> "VllmServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}):\n"
                                   + self.log_tail())
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return self
            except requests.ConnectionError:
                pass
            time.sleep(2)
        self.stop()
        raise TimeoutError(f"vllm serve not ready after {timeout} s:\n" + self.log_tail())

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGINT to the server's own process group (it spawned the engine core and worker),
        then SIGKILL to that group if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def complete(self, prompt, max_tokens: int = 48, **extra) -> list[list[int]]:
        """Token ids of each choice of one /v1/completions request (greedy unless told)."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True, **extra}
        response = requests.post(self.url + "/v1/completions", json=body, timeout=600)
        response.raise_for_status()
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        return [c["token_ids"] for c in choices]

    def chat(self, messages: list[dict], max_tokens: int = 48) -> list[int]:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
        response = requests.post(self.url + "/v1/chat/completions", json=body, timeout=600)
        response.raise_for_status()
        return response.json()["choices"][0]["token_ids"]

    def counters(self, *names: str) -> list[float]:
        """Prometheus counters from /metrics, summed over their labels."""
        text = requests.get(self.url + "/metrics", timeout=30).text
        values = dict.fromkeys(names, 0.0)
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in values:
                values[name] += float(line.rsplit(" ", 1)[1])
        return [values[name] for name in names]

    def spec_counts(self) -> SpecCounts:
        return SpecCounts(*self.counters(*SPEC_COUNTERS))

    def __repr__(self) -> str:
        return f"VllmServer({self.url}, log={self.log})"


def start_server(request, name: str, model: Path, *args: str, env: dict | None = None):
    """A server stopped when the requesting fixture's scope ends; log in reports/vllm/<name>.log."""
    REPORTS.mkdir(parents=True, exist_ok=True)
    server = VllmServer(model, REPORTS / f"{name}.log", *args, env=env)
    request.addfinalizer(server.stop)
    return server.wait_ready()


def speculative(method: str, model: Path, **extra) -> tuple[str, str]:
    return "--speculative-config", json.dumps({"method": method, "model": str(model), **extra})
