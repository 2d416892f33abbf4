"""A llama-server process for the tests: start, query /completion, stop by pid."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build/llama.cpp/build/bin"
LLAMA_SERVER = BIN / "llama-server"
REPORTS = ROOT / "reports" / "llamacpp"  # server logs
PORTS = range(8300, 8400)  # this area's port range
# Every server of the tests: 2 threads (the machine's cores), a context the prompts fit.
# f32 KV caches and no flash attention keep the target's numerics the same whether it decodes
# one token or verifies a drafted block, so greedy outputs can be compared token for token.
COMMON_ARGS = ["-t", "2", "-c", "4096", "--no-warmup", "-ctk", "f32", "-ctv", "f32",
               "-ctkd", "f32", "-ctvd", "f32", "-fa", "off"]


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise RuntimeError("no free port in 8300-8399")


@dataclass
class Completion:
    tokens: list[int]
    draft_n: int           # drafted tokens
    draft_n_accepted: int  # drafted tokens the target accepted

    @property
    def target_steps(self) -> int:
        """Target decodes after the prompt: each yields one token plus the accepted drafts."""
        return len(self.tokens) - 1 - self.draft_n_accepted


def acceptance_length(completions: list[Completion]) -> float:
    """Tokens per target decode step, 1 + accepted / steps, over all completions (steps
    without a draft count too, so this never overstates what speculation gained)."""
    steps = sum(c.target_steps for c in completions)
    accepted = sum(c.draft_n_accepted for c in completions)
    return 1.0 + accepted / steps if steps else float("nan")


class LlamaServer:
    def __init__(self, name: str, *args: str | Path, env: dict | None = None,
                 common_args: list[str] = COMMON_ARGS) -> None:
        if not LLAMA_SERVER.is_file():
            raise FileNotFoundError(f"{LLAMA_SERVER} is missing: run ci/setup/llamacpp.sh")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        REPORTS.mkdir(parents=True, exist_ok=True)
        self.log = REPORTS / f"{name}.log"
        self.command = [str(LLAMA_SERVER), *map(str, args), "--port", str(self.port), *common_args]
        with open(self.log, "w") as out:
            out.write(" ".join(self.command) + "\n")
            out.flush()
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            env=env)

    def wait_ready(self, timeout: float = 120) -> "LlamaServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.process.returncode}):\n" + self.log_tail())
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"llama-server not ready after {timeout} s:\n" + self.log_tail())

    def wait_exit(self, timeout: float = 60) -> int:
        return self.process.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as r:
            return json.loads(r.read())

    def complete(self, prompt, n_predict: int = 64, **extra) -> Completion:
        """Greedy /completion; prompt is text, token ids, or a multimodal prompt object."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "top_k": 1,
                "cache_prompt": False, "return_tokens": True, **extra}
        result = self.post("/completion", body)
        timings = result.get("timings", {})
        return Completion(result["tokens"], timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))

    def props(self) -> dict:
        with urllib.request.urlopen(self.url + "/props", timeout=60) as r:
            return json.loads(r.read())

    def tokenize(self, text: str) -> list[int]:
        return self.post("/tokenize", {"content": text})["tokens"]

    def __repr__(self) -> str:
        return f"LlamaServer({self.url}, log={self.log})"


def start_server(request, name: str, *args: str | Path, env: dict | None = None,
                 common_args: list[str] = COMMON_ARGS) -> LlamaServer:
    """A ready server stopped when the requesting fixture's scope ends."""
    server = LlamaServer(name, *args, env=env, common_args=common_args)
    request.addfinalizer(server.stop)
    return server.wait_ready()
