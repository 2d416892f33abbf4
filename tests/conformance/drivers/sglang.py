"""`python -m sglang.launch_server` (sglang 0.5.23 with sglang_dspark, on CPU) as a
conformance engine.

How each axis is exercised here:
- numerics: fp32 weights and activations, fp32 LFM2 conv states (SGLang keeps them in bf16 by
  default, which rounds decode and verify differently); one request at a time where exact;
- batch: one /generate request carrying every prompt (SGLang's batch API); concurrent: one
  request per prompt, all at once;
- prefix caching: the radix cache (on by default); the run fails unless every request after
  the first read part of its prompt from it (``cached_tokens``);
- chunked prefill: ``--chunked-prefill-size 64``; the run fails unless the scheduler's log shows
  each long prompt prefilled in chunks of at most 64 tokens;
- preemption: a 640-token KV pool; the speculative run fails unless SGLang retracted requests
  (``sglang:num_retracted_requests_total``);
- image input: the LFM2-VL target; the run fails unless each prompt carried image tokens;
- EOS / stop strings: the run fails unless some request really stopped on them;
- hybrid rollback: the speculative run fails unless some block was accepted only in part;
- counters: SGLang's own per-request ``meta_info`` (verify steps, proposed and correct drafts).
"""

from __future__ import annotations

import base64
import re
import time

from blockdraft.fixtures.vision import drafter_family

from ..compare import Counters, Output, Run
from ..prompts import Request
from ..scenarios import Scenario
from .base import (BASELINE, FIXTURES, PROFILES, REPO, Driver, EngineProcess, Method,
                   free_port, http_json, metrics)

PYTHON = REPO / ".venvs" / "sglang" / "bin" / "python"
PORTS = range(8200, 8300)  # this engine's port range on shared machines
CHUNK = 64                 # --chunked-prefill-size
TINY_KV_TOKENS = 640       # enough for any one request, too few for 8 at once: SGLang retracts
ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_MAMBA_CONV_DTYPE": "float32"}
# tiny_kv: admit optimistically (SGLang reserves 0.7 x max_new_tokens per request by default,
# which can keep all 8 requests inside the pool), so running requests outgrow it and retract
TINY_KV_ENV = {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.05"}
# /server_info's avg_spec_accept_length (the only acceptance figure SGLang gives an OpenAI
# client) adds a step's counts to its totals only when it logs a decode step, every 40 by default
# (metrics_reporter.py): logging every step makes it the mean over all of a run's steps
COMPLETE_ACCEPT_LENGTH = ["--decode-log-interval", "1"]
COMMON_ARGS = ["--device", "cpu", "--dtype", "float32", "--chunked-prefill-size", str(CHUNK),
               "--enable-metrics", "--random-seed", "0", "--skip-server-warmup",
               # compact JSON: xgrammar otherwise allows unbounded whitespace, which the fixtures'
               # targets (trained on indented code) spend structured_output's tokens on
               "--constrained-json-disable-any-whitespace"]
PREFILL_LOG = re.compile(r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+)")


def server_args(config: str, family: str, method: Method, port: int | None) -> list[str]:
    """launch_server's arguments (port None: no HTTP server, for the offline Engine); the
    DSPARK ones are the users' documented command."""
    http = ["--host", "127.0.0.1", "--port", str(port)] if port is not None else []
    argv = [*COMMON_ARGS, *http, "--model-path", str(FIXTURES / family / "target"),
            "--max-total-tokens", str(TINY_KV_TOKENS if config == "tiny_kv" else 8192)]
    if method.name == "DSPARK":
        # on CPU the plugin maps flashinfer to the CPU draft backend
        argv += ["--speculative-algorithm", "DSPARK",
                 "--speculative-draft-model-path", str(FIXTURES / drafter_family(family) / method.drafter),
                 "--speculative-draft-attention-backend", "flashinfer",
                 "--speculative-dspark-block-size", str(method.max_draft)]
    if config == "bench":
        argv += COMPLETE_ACCEPT_LENGTH
    return argv


def engine_process(name: str, config: str, family: str, method: Method) -> EngineProcess:
    port = free_port(PORTS)
    env = {**ENV, **(TINY_KV_ENV if config == "tiny_kv" else {})}
    if config == "bench":  # /start_profile writes its traces there
        env["SGLANG_TORCH_PROFILER_DIR"] = str(PROFILES / "sglang")
    return EngineProcess(name, [str(PYTHON), "-m", "sglang.launch_server",
                                *server_args(config, family, method, port)],
                         port, "/health", method, env)


class SglangDriver(Driver):
    engine = "sglang"
    vision_family = "lfm2_vl"
    methods = (Method("DSPARK", "dspark", ours=True, max_draft=9),)

    def __init__(self) -> None:
        self._metas: list[dict] = []  # meta_info of the current scenario's requests

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        family = self.family(scenario)
        if not (FIXTURES / family / "target").exists():
            return f"no {family} fixture"
        if method.drafter and not (FIXTURES / drafter_family(family) / method.drafter).exists():
            return f"no {method.drafter} drafter for the {family} fixtures"
        return None

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        return engine_process(f"sglang-{config}-{family}-{method.name}", config, family, method)

    @staticmethod
    def _sampling(scenario: Scenario) -> dict:
        sampling = {"max_new_tokens": scenario.max_tokens, "temperature": scenario.temperature,
                    "sampling_seed": 1234}
        if scenario.temperature == 0.0:
            sampling["top_k"] = 1
        if scenario.stop:
            sampling["stop"] = list(scenario.stop)
        if scenario.json_schema:  # SGLang's grammar backend (xgrammar by default)
            sampling["json_schema"] = scenario.json_schema
        if scenario.choices > 1:  # parallel sampling: a batch's results come prompt by prompt
            sampling["n"] = scenario.choices
        return sampling

    def _output(self, body: dict, want_top2: bool) -> tuple[Output, Counters]:
        meta = body["meta_info"]
        self._metas.append(meta)
        top2 = ([[entry[0] for entry in position] for position in meta["output_top_logprobs"]]
                if want_top2 else None)
        # SGLang counts the verify steps that did not finish the request, and their drafts
        counters = Counters(meta.get("spec_verify_ct", 0), meta.get("spec_num_proposed_drafts", 0),
                            meta.get("spec_num_correct_drafts", 0))
        finish = meta.get("finish_reason") or {}
        return Output(body["output_ids"], top2, finish.get("type", "")), counters

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        payload: dict = {"sampling_params": self._sampling(scenario)}
        if request.image is not None:
            payload["text"] = "<image>" + request.prompt_text
            payload["image_data"] = ("data:image/png;base64,"
                                     + base64.b64encode(request.image.read_bytes()).decode())
        else:
            payload["input_ids"] = list(request.prompt_ids)
        if want_top2:
            payload.update(return_logprob=True, top_logprobs_num=2, logprob_start_len=-1)
        return self._output(self._generate(engine, payload), want_top2)

    @staticmethod
    def _generate(engine: EngineProcess, payload: dict):
        """SGLang's native generate: one body, or a list of them for a batch."""
        return http_json(engine.url + "/generate", payload)

    def run(self, engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
            want_top2: bool) -> Run:
        self._metas = []
        log_start = engine.log_path.stat().st_size
        retracted = self._retracted(engine)
        if scenario.mode == "batch" and all(r.image is None for r in requests):
            started = time.time()
            payload = {"input_ids": [list(r.prompt_ids) for r in requests],
                       "sampling_params": self._sampling(scenario)}
            if want_top2:
                payload.update(return_logprob=True, top_logprobs_num=2, logprob_start_len=-1)
            results = [self._output(body, want_top2)
                       for body in self._generate(engine, payload)]
            run = Run([o for o, _ in results], sum((c for _, c in results), Counters()),
                      time.time() - started)
        else:
            run = super().run(engine, scenario, requests, want_top2)
        with engine.log_path.open("rb") as log:
            log.seek(log_start)
            log_text = log.read().decode(errors="replace")
        problem = not_exercised(scenario, requests, self._metas, log_text,
                                self._retracted(engine) - retracted, engine.method)
        if problem:
            raise RuntimeError(problem)
        return run

    def busy_requests(self, engine: EngineProcess) -> int:
        values = metrics(engine.url)
        return int(values.get("sglang:num_running_reqs", 0) + values.get("sglang:num_queue_reqs", 0))

    @staticmethod
    def _retracted(engine: EngineProcess) -> float:
        return metrics(engine.url).get("sglang:num_retracted_requests_total", 0.0)


def not_exercised(scenario: Scenario, requests: tuple[Request, ...], metas: list[dict],
                  log_text: str, retracted: float, method: Method) -> str | None:
    """Why the scenario's axis did not really happen in this run (None: it did). ``metas``:
    each request's meta_info, in request order for sequential runs; ``log_text``: the server
    log written during the run; ``retracted``: requests SGLang retracted during the run."""
    speculative = method is not BASELINE
    if scenario.prompts == "shared_prefix":
        cold = [i for i, m in enumerate(metas[1:], 1) if not m.get("cached_tokens")]
        if cold:
            return f"prefix caching did not hit: requests {cold} read no cached tokens"
    if scenario.prompts == "long":
        chunks = [int(n) for _, n in PREFILL_LOG.findall(log_text)]
        needed = sum(-(-len(r.prompt_ids) // CHUNK) for r in requests)
        if max(chunks, default=CHUNK + 1) > CHUNK or len(chunks) < needed:
            return (f"prefill was not chunked by {CHUNK}: prefill batches of {chunks} tokens for "
                    f"prompts of {[len(r.prompt_ids) for r in requests]}")
    if scenario.config == "tiny_kv" and speculative and retracted <= 0:
        return f"no request was retracted with a {TINY_KV_TOKENS}-token KV pool"
    if scenario.config == "vision" and not all(m.get("image_tokens") for m in metas):
        return f"the image did not reach the target: image tokens {[m.get('image_tokens') for m in metas]}"
    finishes = [m.get("finish_reason") or {} for m in metas]
    if scenario.name == "eos_in_block" and not any(
            f.get("type") == "stop" and not isinstance(f.get("matched"), str) for f in finishes):
        return f"no request stopped on EOS: finish reasons {finishes}"
    if scenario.stop and not any(f.get("matched") in scenario.stop for f in finishes):
        return f"no request stopped on {scenario.stop}: finish reasons {finishes}"
    if scenario.family == "lfm2" and speculative:
        partial = sum(sum(m.get("spec_correct_drafts_histogram", [])[1:method.max_draft])
                      for m in metas)
        if not partial:
            return "no block was accepted only in part: the conv-state rollback was not exercised"
    return None


__all__ = ["SglangDriver", "engine_process", "server_args", "not_exercised"]
