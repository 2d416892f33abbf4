"""What every engine driver provides, and the engine processes they start."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from ..client import Cut, LiveStreams, Streamed, abandon_streams, stream
from ..compare import Counters, Output, Run
from ..prompts import Request, text_ids, tokenizer
from ..scenarios import Scenario

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "build" / "fixtures"
LOGS = REPO / "reports" / "conformance" / "logs"
PROFILES = REPO / "reports" / "bench" / "profiles"  # the "bench" config's profiler traces


@dataclass(frozen=True)
class Method:
    name: str                # "baseline", or the speculative method as the engine names it
    drafter: str | None      # fixture role of the drafter ("dflash", "lilicorr", "dspark")
    ours: bool = False       # our method (True) or the engine's own DFlash control
    max_draft: int = 7       # drafted tokens per step (with cost_aware: at most)
    # the engine picks each step's drafted length from its measured verify cost and running
    # acceptance (llama-server's --spec-draft-cost-aware, vllm_lilicorr's "cost_aware": true)
    cost_aware: bool = False


BASELINE = Method("baseline", None)


def cost_aware_variants(methods: tuple[Method, ...]) -> tuple[Method, ...]:
    """The same methods with the engine choosing each step's drafted length (0 to max_draft)."""
    return tuple(dataclasses.replace(m, name=f"{m.name}+cost-aware", cost_aware=True)
                 for m in methods)
# A cost-aware drafted length changes only how many drafted tokens a step verifies: one request,
# a batch, concurrent requests and a hybrid target's state rollback after partial acceptance
COST_AWARE_SCENARIOS = ("one_request", "batch_mixed_lengths", "concurrent_requests",
                        "hybrid_partial_acceptance")


def free_port(ports: range | None = None) -> int:
    """A free local port: the first in ``ports`` (an engine's share of a shared machine's
    ports), or any."""
    for port in ports or (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def http_json(url: str, payload: dict | None = None, timeout: float = 600.0) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def http_text(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def prometheus_samples(url: str) -> list[tuple[str, str, float]]:
    """(name, labels, value) of every sample of a Prometheus /metrics page; labels is the text
    between the braces ("" without)."""
    samples = []
    for line in http_text(url + "/metrics").splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            samples.append((name, labels.rstrip("}"), float(value)))
    return samples


def long_streams(requests, max_tokens: int) -> list[dict]:
    """OpenAI completions payloads (to stream) that run greedy for ``max_tokens`` whatever the
    text: for clients that leave, or a server stopped, mid-generation."""
    return [{"model": "target", "prompt": tokenizer().decode(list(r.prompt_ids)),
             "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True} for r in requests]


T = TypeVar("T")


def each_request(scenario: Scenario, count: int, answer: Callable[[int], T]) -> list[T]:
    """``answer(i)`` for each of a scenario's requests, in request order: one at a time for a
    sequential scenario, otherwise all at once (or ``scenario.in_flight`` at a time)."""
    if scenario.mode == "sequential":
        return [answer(i) for i in range(count)]
    with ThreadPoolExecutor(min(count, scenario.in_flight or count)) as pool:
        return list(pool.map(answer, range(count)))


def metrics(url: str) -> dict[str, float]:
    """Every sample of a Prometheus /metrics page, summed over its labels."""
    values: dict[str, float] = {}
    for name, _, value in prometheus_samples(url):
        values[name] = values.get(name, 0.0) + value
    return values


def metric_by_label(url: str, name: str, label: str) -> dict[str, float]:
    """One metric of a Prometheus /metrics page by the value of one of its labels (summed
    over the others)."""
    values: dict[str, float] = {}
    for sample, labels, value in prometheus_samples(url):
        if sample == name and f'{label}="' in labels:
            key = labels.split(f'{label}="', 1)[1].split('"', 1)[0]
            values[key] = values.get(key, 0.0) + value
    return values


class ProcessGroup:
    """An engine's subprocess (``self.process``) started in a session of its own, whose process
    group holds everything the engine starts."""

    process: subprocess.Popen | None

    def group(self) -> dict[int, tuple[str, int]]:
        """pid -> (name, resident pages) of every live process of the engine's group (the
        server, its workers and what they started; start_new_session makes the group)."""
        members = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
                name, fields = text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()
                if self.process is not None and int(fields[2]) == self.process.pid and fields[0] != "Z":
                    members[int(stat.parent.name)] = (name, int(fields[21]))
            except (OSError, IndexError, ValueError):
                continue  # the process ended while it was read
        return members

    def rss_mb(self) -> float:
        """Resident memory of the engine's whole process group."""
        return sum(rss for _, rss in self.group().values()) * os.sysconf("SC_PAGE_SIZE") / 2**20

    def peak_rss(self) -> "PeakRss":
        return PeakRss(self)


class EngineProcess(ProcessGroup):
    """An engine server subprocess with its log in reports/conformance/logs/, stopped on exit."""

    def __init__(self, name: str, argv: list[str], port: int, health_path: str, method: "Method",
                 env: dict[str, str] | None = None, startup_timeout: float = 600.0) -> None:
        self.name, self.argv, self.port, self.method = name, argv, port, method
        self.url = f"http://127.0.0.1:{port}"
        self.health_path, self.env, self.startup_timeout = health_path, env, startup_timeout
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log_path = LOGS / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def check_healthy(self, after: str) -> None:
        try:
            urllib.request.urlopen(self.url + self.health_path, timeout=30)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise RuntimeError(f"{self.name} unhealthy after {after}: {exc}") from exc

    def terminate(self, grace: float = 60.0) -> float:
        """SIGTERM to the server's own process only, as a process supervisor stops it: it must
        exit within ``grace`` seconds and take every process it started with it. Returns the
        seconds it took; leftovers are killed, then reported."""
        started = time.time()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{self.name} still running {grace:.0f} s after SIGTERM") from None
        seconds = time.time() - started
        deadline = time.time() + 10  # children may take a moment to notice
        while (left := self.group()) and time.time() < deadline:
            time.sleep(0.2)
        if left:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise RuntimeError(f"{len(left)} processes of {self.name} outlived it after SIGTERM: "
                               + ", ".join(f"{pid} {name}" for pid, (name, _) in sorted(left.items())))
        return seconds

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> "EngineProcess":
        log = self.log_path.open("w")
        self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                        env={**os.environ, **(self.env or {})},
                                        start_new_session=True, cwd=REPO)
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode} before "
                                   f"serving:\n{self.log_tail()}")
            try:
                urllib.request.urlopen(self.url + self.health_path, timeout=5)
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        self.__exit__(None, None, None)
        raise RuntimeError(f"{self.name} did not become healthy in {self.startup_timeout} s:\n"
                           f"{self.log_tail()}")

    def __exit__(self, *exc) -> None:
        if self.process is None:
            return
        if self.process.poll() is not None:  # terminated already: clear what it left behind
            if self.group():
                os.killpg(self.process.pid, signal.SIGKILL)
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class PeakRss:
    """The highest resident memory of an engine's process group while the block runs, sampled
    every 0.2 s (``mb`` once the block has ended)."""

    def __init__(self, engine: ProcessGroup) -> None:
        self.engine, self.mb = engine, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.mb = max(self.mb, self.engine.rss_mb())
            if self._stop.wait(0.2):
                return

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class Driver(ABC):
    engine: str
    methods: tuple[Method, ...]
    # the methods again with the engine choosing each step's drafted length (Method.cost_aware)
    cost_aware_methods: tuple[Method, ...] = ()
    vision_family: str
    # True: the engine reports speculative counters only server-wide (diffed around a scenario)
    server_wide_counters = False
    # scenarios this engine runs besides the shared list (see scenarios.py)
    extra_scenarios: tuple[Scenario, ...] = ()
    # tokens of the streams a shutdown scenario interrupts, where the scenario's are too few to
    # outlast the steps before the signal on a fast machine
    shutdown_stream_tokens = 0
    # where in a speculative step, as a share of it after the chunk the last step streamed, the
    # target's verify forward runs: its later part, where the draft comes first (llama-server's
    # update_slots, SGLang's DSPARK worker) and takes at most a third of the step
    verify_at = 0.65

    def family(self, scenario: Scenario) -> str:
        return self.vision_family if scenario.family == "vision" else scenario.family

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        """Why this engine cannot run the scenario with the method, or None (engines add their
        own reasons to these)."""
        if method.cost_aware and scenario.name not in COST_AWARE_SCENARIOS:
            return ("the cost-aware variants run the key scenarios (" + ", ".join(COST_AWARE_SCENARIOS)
                    + "); each fixed-length method runs them all")
        return None

    @abstractmethod
    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        """An engine (not yet entered) serving the family's target, with the method's drafter."""

    @abstractmethod
    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        """One request, with its own speculative counters (empty if server-wide)."""

    def counters(self, engine: EngineProcess) -> Counters:
        """Server-wide cumulative counters (engines with server_wide_counters)."""
        raise NotImplementedError

    def running_counters(self, engine: EngineProcess) -> Counters | None:
        """The server-wide counters while requests still run (``counters`` may wait for them),
        or None where an engine records a request's counters only when it ends (llama-server
        adds them at metrics_on_prediction; SGLang counts per request)."""
        return None

    @abstractmethod
    def busy_requests(self, engine: EngineProcess) -> int:
        """Requests the server is running or queueing."""

    def drop_streams(self, engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
                     speculative: bool, released_within: float = 60.0) -> list[Cut]:
        """Clients that disconnect, with speculation in the middle of a step, while the engine
        verifies their drafts: the server must release their requests (and with them their KV
        and draft state) instead of generating on for nobody. Returns the cuts. Without
        speculation they leave as soon as they have read some text: there a step takes a few
        ms, less than a busy client's lag behind its socket."""
        cuts = abandon_streams(engine.url + "/v1/completions", long_streams(
            [requests[i % len(requests)] for i in range(scenario.abandoned_streams)], 400),
            at=self.verify_at if speculative else 0.0)
        if not cuts:
            raise RuntimeError("every stream ended before its client left: nothing was abandoned")
        deadline = time.time() + released_within
        while (busy := self.busy_requests(engine)) and time.time() < deadline:
            time.sleep(0.5)
        if busy:
            raise RuntimeError(f"{busy} requests still held {released_within:.0f} s after "
                               f"{len(cuts)} clients disconnected")
        return cuts

    def shut_down_while_streaming(self, engine: EngineProcess, scenario: Scenario,
                                  requests: tuple[Request, ...]) -> Run:
        """The requests after the first stream (long, ignoring EOS) while the server is sent
        SIGTERM: it must exit promptly, leave no process behind and close every stream. The
        speculative counters are read just before the signal, over the streams where the engine
        counts running requests; elsewhere a short request for the first prompt beside the
        streams is the evidence (it needs a free slot, hence one stream fewer than prompts).
        Waiting for that request lets a slow machine finish the streams first, so only engines
        that need it send it."""
        before = self.counters(engine) if self.server_wide_counters else Counters()
        payloads = long_streams(requests[1:], max(scenario.max_tokens, self.shutdown_stream_tokens))
        with LiveStreams(engine.url + "/v1/completions", payloads,
                         chunks=8) as streams:  # several verify steps: counters to read
            if not streams.wait_started(120):
                raise RuntimeError("the streams did not start within 120 s")
            if (running := self.running_counters(engine)) is not None:
                counters = running - before
            else:
                _, counters = self.generate(engine, dataclasses.replace(scenario, max_tokens=16),
                                            requests[0], False)
                if self.server_wide_counters:
                    counters = self.counters(engine) - before
            if streams.running() < len(payloads):
                raise RuntimeError(f"only {streams.running()} of {len(payloads)} streams still "
                                   "ran at SIGTERM: raise max_tokens")
            seconds = engine.terminate()
            if open_streams := streams.join(30):
                raise RuntimeError(f"{open_streams} streams still open 30 s after the server exited")
        texts = ["".join(t) for t in streams.texts]
        return Run([Output([], streamed_text=t, streamed_tokens=len(text_ids(t))) for t in texts],
                   counters, seconds)

    def stream(self, engine: EngineProcess, scenario: Scenario,
               request: Request) -> tuple[Output, Counters]:
        """One request streamed through the OpenAI completions API, as chat front-ends and
        most clients read answers: the deltas of multi-token steps must add up to the text.
        Counters: empty (streams carry none; server-wide counters include them)."""
        streamed = self._stream(engine, scenario, request)
        return Output([], streamed_text=streamed.text, streamed_tokens=streamed.tokens), Counters()

    @staticmethod
    def _stream(engine: EngineProcess, scenario: Scenario, request: Request) -> Streamed:
        payload = {"model": "target", "prompt": list(request.prompt_ids),
                   "max_tokens": scenario.max_tokens, "temperature": scenario.temperature}
        if scenario.stop:
            payload["stop"] = list(scenario.stop)
        return stream(engine.url + "/v1/completions", payload)

    def accepted_per_position(self, engine: EngineProcess) -> list[int] | None:
        """Server-wide cumulative accepted tokens at each draft position, where the engine
        counts them (None where it reports totals only)."""
        return None

    def run(self, engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
            want_top2: bool) -> Run:
        """All requests of a scenario: one at a time, or all at once (batch, concurrent)."""
        before = self.counters(engine) if self.server_wide_counters else Counters()

        def one(index: int) -> tuple[Output, Counters]:
            if scenario.is_streamed(index):
                return self.stream(engine, scenario, requests[index])
            return self.generate(engine, scenario, requests[index], want_top2)

        started = time.time()
        results = each_request(scenario, len(requests), one)
        seconds = time.time() - started
        outputs = [output for output, _ in results]
        if self.server_wide_counters:
            counters = self.counters(engine) - before
        else:
            counters = sum((c for _, c in results), Counters())
        return Run(outputs, counters, seconds)
