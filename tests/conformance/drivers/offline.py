"""An engine driven through its offline Python API (vLLM's `LLM`, SGLang's `Engine`), in a
host process that runs in the engine's own environment and answers the JSON lines of
host_protocol. Everything the host prints (the engine's logs) goes to the engine's log in
reports/conformance/logs/."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time

from .base import LOGS, REPO, Method, ProcessGroup
from .host_protocol import REPLY_FD


class OfflineEngine(ProcessGroup):
    def __init__(self, name: str, python: str, host_module: str, engine_args: dict,
                 method: Method, env: dict[str, str], startup_timeout: float = 600.0) -> None:
        self.name, self.method = name, method
        self.argv = [python, "-m", host_module, json.dumps(engine_args)]
        self.env, self.startup_timeout = env, startup_timeout
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self._replies: queue.Queue[dict | None] = queue.Queue()

    def _read_replies(self, fd: int) -> None:
        with os.fdopen(fd) as replies:
            for line in replies:
                self._replies.put(json.loads(line))
        self._replies.put(None)  # the host is gone

    def _write_log(self) -> None:
        with self.log_path.open("w") as log:
            for line in self.process.stdout:
                log.write(line)
                log.flush()

    def _reply(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                reply = self._replies.get(timeout=1.0)
                break
            except queue.Empty:
                # worker processes forked by the engine may hold the reply pipe open after
                # the host died, so its end is no sign; the host's exit is
                if self.process.poll() is not None:
                    reply = None
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} gave no answer in {timeout:.0f} s") from None
        if reply is None:
            raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> "OfflineEngine":
        replies, reply_end = os.pipe()
        self.process = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, cwd=REPO, env={**os.environ, **self.env, REPLY_FD: str(reply_end)},
            pass_fds=(reply_end,), start_new_session=True)
        os.close(reply_end)
        threading.Thread(target=self._read_replies, args=(replies,), daemon=True).start()
        threading.Thread(target=self._write_log, daemon=True).start()
        try:
            self._reply(self.startup_timeout)  # {"ready": true} once the engine is built
        except RuntimeError:
            self.__exit__()
            raise
        return self

    def request(self, payload: dict, timeout: float = 600.0) -> dict:
        self.process.stdin.write(json.dumps(payload) + "\n")
        self.process.stdin.flush()
        return self._reply(timeout)

    def check_healthy(self, after: str) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited after {after}:\n{self.log_tail()}")

    def __exit__(self, *exc) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.stdin.close()  # the host shuts its engine down at end of input
        deadline = time.time() + 60
        while self.process.poll() is None and time.time() < deadline:
            time.sleep(0.5)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
