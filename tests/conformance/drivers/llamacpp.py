"""llama-server (the pinned llama.cpp with llamacpp_patches) as a conformance engine.

How the axes are exercised here:
- numerics: f32 KV caches (target and draft) and no flash attention, so the target computes a
  position the same way whether it decodes one token or verifies a drafted block;
- slots: 4 slots sharing one unified KV pool (`-np 4 -kvu`, what llama-server sets up when users
  give no `-np`; 2 in the two_slots configuration): when a request starts, idle slots' caches
  (target and draft) are saved to the host-RAM prompt cache and cleared from the pool;
- batch: one /completion request carrying every prompt (llama-server's multi-prompt API);
  concurrent: one request per prompt, all at once;
- prefix caching: `cache_prompt`; a run fails unless every repeated prefix was read from the
  cache (`timings.cache_n`);
- chunked prefill: `-b/-ub 64`, every prompt is decoded (and its features injected into the
  draft) 64 tokens at a time; a run fails unless each "long" prompt spans several chunks;
- image input: `--mmproj`; a run fails unless the target evaluated more prompt tokens than the
  text alone has (the image tokens reached it);
- EOS and stop strings: a run fails unless some output really ended on EOS / the stop string;
- counters: llama-server counts verification steps only server-wide (`/metrics`), so they are
  diffed around a scenario, once they account for every request's own drafted and accepted
  tokens (`timings.draft_n`, `draft_n_accepted`).
"""

from __future__ import annotations

import base64
import json
import time

from blockdraft.fixtures.vision import drafter_family

from ..compare import Counters, Output, Run
from ..prompts import Request
from ..scenarios import HELD_OUT_SCENARIOS, TWO_SLOTS, Scenario
from .base import (FIXTURES, REPO, Driver, EngineProcess, Method, cost_aware_variants,
                   each_request, free_port, http_json, metrics)

LLAMA_SERVER = REPO / "build" / "llama.cpp" / "build" / "bin" / "llama-server"
GGUF = FIXTURES / "gguf"
PORTS = range(8300, 8400)  # this engine's share of the machine's ports
CHUNK = 64                 # -b / -ub: prompt tokens per decode
COMMON_ARGS = ["-t", "2", "-c", "8192", "-np", "4", "-kvu", "-b", str(CHUNK), "-ub", str(CHUNK),
               "--no-warmup", "--metrics",
               "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32", "-fa", "off"]
METRICS = {"drafts": "llamacpp:spec_decode_num_drafts_total",  # verification steps
           "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
           "accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens_total"}


def gguf(family: str, role: str):
    if role not in ("target", "mmproj"):
        family = drafter_family(family)
    return GGUF / f"{family}-{role}.gguf"


def speculative_args(method: Method, family: str) -> list[str]:
    """Each method as its users write it (SPEC.md); the control is upstream's own DFlash."""
    if method.drafter is None:
        return []
    drafter = str(gguf(family, method.drafter))
    cost_aware = ["--spec-draft-cost-aware"] if method.cost_aware else []
    if method.drafter == "dflash":
        return ["--spec-type", "draft-dflash", "-md", drafter, "--spec-draft-n-max", str(method.max_draft),
                *cost_aware]
    if method.drafter == "lilicorr":
        return ["--spec-type", "draft-dflash", "--spec-draft-model", drafter, *cost_aware]
    if method.drafter == "dspark":
        return ["-md", drafter, "--spark-block-size", str(method.max_draft), *cost_aware]
    raise ValueError(f"unknown llama.cpp method {method.name!r}")


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaCppDriver(Driver):
    engine = "llamacpp"
    vision_family = "lfm2_vl"
    server_wide_counters = True
    extra_scenarios = (TWO_SLOTS, *HELD_OUT_SCENARIOS)
    methods = (
        Method("draft-dflash", "dflash", ours=False, max_draft=7),
        Method("draft-dflash-lilicorr", "lilicorr", ours=True, max_draft=7),
        Method("draft-dspark", "dspark", ours=True, max_draft=8),
    )
    # the same commands with --spec-draft-cost-aware: each step drafts what this machine's verify
    # cost pays for (0 to the fixed length); the benchmark runs them beside the fixed length
    cost_aware_methods = cost_aware_variants(methods)

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        if reason := super().unavailable(scenario, method):
            return reason
        if scenario.config == "tiny_kv":
            return ("llama-server never preempts a running request: when its KV pool is full it "
                    "clears idle slots and halves the batch, then fails every running request "
                    "('Context size has been exceeded', server-context.cpp)")
        family = self.family(scenario)
        if method.drafter and not gguf(family, method.drafter).exists():
            return f"no {method.drafter} GGUF for the {family} fixtures"
        return None

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        port = free_port(PORTS)
        args = list(COMMON_ARGS)
        if config == "two_slots":
            args[args.index("-np") + 1] = "2"
        if config == "bench":  # common_speculative's per-request statistics (draft time)
            args += ["-lv", "4"]
        argv = [str(LLAMA_SERVER), "-m", str(gguf(family, "target")),
                "--host", "127.0.0.1", "--port", str(port), *args]
        if config == "vision":
            argv += ["--mmproj", str(gguf(family, "mmproj"))]
        argv += speculative_args(method, family)
        return EngineProcess(f"llamacpp-{config}-{family}-{method.name}", argv, port, "/health", method)

    @staticmethod
    def _payload(scenario: Scenario, want_top2: bool) -> dict:
        payload = {"n_predict": scenario.max_tokens, "seed": 1234, "temperature": scenario.temperature,
                   "cache_prompt": True, "return_tokens": True, "stop": list(scenario.stop)}
        if scenario.temperature == 0.0:
            payload["top_k"] = 1
        if scenario.json_schema:  # llama-server turns it into a grammar
            payload["json_schema"] = json.loads(scenario.json_schema)
        if scenario.choices > 1:  # child tasks that copy the parent's slot once it has prefilled
            payload["n_cmpl"] = scenario.choices
        if want_top2:
            payload["n_probs"] = 2  # log-probs of the full distribution, before sampling
        return payload

    def _complete(self, engine: EngineProcess, scenario: Scenario, request: Request,
                  want_top2: bool) -> dict:
        payload = self._payload(scenario, want_top2)
        if request.image is None:
            payload["prompt"] = list(request.prompt_ids)
            return http_json(engine.url + "/completion", payload)
        # the server picks its media marker at start-up and tells it in /props
        marker = http_json(engine.url + "/props")["media_marker"]
        payload["prompt"] = {"prompt_string": f"{marker}{request.prompt_text}",
                             "multimodal_data": [base64.b64encode(request.image.read_bytes()).decode()]}
        body = http_json(engine.url + "/completion", payload)
        text = http_json(engine.url + "/tokenize", {"content": request.prompt_text})["tokens"]
        if body["tokens_evaluated"] <= len(text):
            raise RuntimeError(f"the image did not reach the target: {body['tokens_evaluated']} prompt "
                               f"tokens evaluated for {len(text)} of text")
        return body

    @staticmethod
    def _output(body: dict, want_top2: bool) -> tuple[Output, Counters]:
        top2 = None
        if want_top2:
            top2 = [[t["logprob"] for t in p["top_logprobs"]] for p in body.get("completion_probabilities", [])]
        timings = body.get("timings", {})
        # per request the server reports drafted and accepted tokens, not verification steps
        counters = Counters(0, timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))
        return Output(body["tokens"], top2, body.get("stop_type", "")), counters

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        return self._output(self._complete(engine, scenario, request, want_top2), want_top2)

    def stream(self, engine: EngineProcess, scenario: Scenario,
               request: Request) -> tuple[Output, Counters]:
        """The last chunk of llama-server's stream carries the request's draft counts."""
        streamed = self._stream(engine, scenario, request)
        counters = Counters(0, streamed.timings.get("draft_n", 0),
                            streamed.timings.get("draft_n_accepted", 0))
        return Output([], streamed_text=streamed.text, streamed_tokens=streamed.tokens), counters

    def run(self, engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
            want_top2: bool) -> Run:
        if scenario.prompts == "long" and any(len(r.prompt_ids) <= CHUNK for r in requests):
            raise RuntimeError(f"a 'long' prompt fits in one {CHUNK}-token chunk: nothing is chunked")
        before = self.counters(engine)
        started = time.time()
        if scenario.mode == "batch":
            payload = self._payload(scenario, want_top2)
            payload["prompt"] = [list(r.prompt_ids) for r in requests]
            bodies = http_json(engine.url + "/completion", payload)  # in prompt order
            results = [self._output(b, want_top2) for b in bodies]
        else:
            def one(index: int) -> tuple[dict | None, tuple[Output, Counters]]:
                if scenario.is_streamed(index):
                    return None, self.stream(engine, scenario, requests[index])
                body = self._complete(engine, scenario, requests[index], want_top2)
                return body, self._output(body, want_top2)

            answers = each_request(scenario, len(requests), one)
            bodies = [body for body, _ in answers if body is not None]
            results = [result for _, result in answers]
        seconds = time.time() - started
        self._check_axis(scenario, requests, bodies)
        reported = sum((c for _, c in results), Counters())
        return Run([o for o, _ in results], self._counters_since(engine, before, reported), seconds)

    @staticmethod
    def _check_axis(scenario: Scenario, requests: tuple[Request, ...], bodies: list[dict]) -> None:
        """Fail a run whose scenario did not exercise what it is about."""
        if scenario.prompts == "shared_prefix":
            shared = min(common_prefix(requests[0].prompt_ids, r.prompt_ids) for r in requests)
            reused = [b["timings"]["cache_n"] for b in bodies]
            if shared < CHUNK or min(reused[1:]) < shared:
                raise RuntimeError(f"the {shared}-token shared prefix was not read from the cache: "
                                   f"cached prompt tokens per request {reused}")
        finishes = {b.get("stop_type") for b in bodies}
        if scenario.stop and "word" not in finishes:
            raise RuntimeError(f"no output ended on the stop string (finishes: {sorted(finishes)})")
        if scenario.prompts == "chat" and scenario.temperature == 0.0 and "eos" not in finishes:
            raise RuntimeError(f"no answer ended on EOS (finishes: {sorted(finishes)})")

    def _counters_since(self, engine: EngineProcess, before: Counters, reported: Counters) -> Counters:
        """The server-wide counters' growth, read once it includes every request's own counts
        (a request is added when its slot is released, just after its response is sent)."""
        deadline = time.time() + 10
        while True:
            grown = self.counters(engine) - before
            if (grown.draft_tokens, grown.accepted_tokens) == (reported.draft_tokens, reported.accepted_tokens):
                return grown
            if time.time() > deadline:
                raise RuntimeError(f"/metrics counted {grown}, the responses {reported}")
            time.sleep(0.05)

    def busy_requests(self, engine: EngineProcess) -> int:
        values = metrics(engine.url)
        return int(values.get("llamacpp:requests_processing", 0)
                   + values.get("llamacpp:requests_deferred", 0))

    def counters(self, engine: EngineProcess) -> Counters:
        """Server-wide cumulative speculative counters."""
        values = metrics(engine.url)
        return Counters(**{field: int(values.get(name, 0)) for field, name in METRICS.items()})
