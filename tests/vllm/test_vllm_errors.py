"""Bad input gets one line naming cause and fix, through vLLM's own entry points and before any
model loads: engine config (what `LLM(...)` and `vllm serve` build), `LLM(...)`, `vllm serve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from lilicorr_checkpoints import drafter_config, write_checkpoint
from tests.conformance.drivers import vllm as driver
from tests.conformance.drivers.base import free_port

ENV = {**os.environ, **driver.ENV}


@pytest.fixture(scope="module")
def drafters(tmp_path_factory, lilicorr, dflash):
    """Bad checkpoints (configs and safetensors headers only: nothing gets that far)."""
    root = tmp_path_factory.mktemp("bad")
    return {
        "dflash": str(dflash),
        "lilicorr": str(lilicorr),
        "eagle3": str(write_checkpoint(root / "eagle3", drafter_config("LlamaForCausalLMEagle3"),
                                       names=["midlayer.mlp.up_proj.weight"])),
        "topk3": str(write_checkpoint(root / "topk3", drafter_config(lilicorr_candidate_topk=3),
                                      names=["x"])),
        "vocab": str(write_checkpoint(root / "vocab", {**drafter_config(), "vocab_size": 4096})),
        "taps": str(write_checkpoint(root / "taps", drafter_config(target_layer_ids=[0, 9]))),
        "missing": str(write_checkpoint(root / "missing", drafter_config(),
                                        drop=["lilicorr.out_head.weight"])),
    }


CASES = {
    "dflash checkpoint as lilicorr": ({"method": "lilicorr", "model": "dflash"},
                                      "is a dflash checkpoint; use \"method\":\"dflash\""),
    "eagle3 checkpoint as lilicorr": ({"method": "lilicorr", "model": "eagle3"},
                                      "is a eagle3 checkpoint; use \"method\":\"eagle3\""),
    "lilicorr checkpoint as eagle3": ({"method": "eagle3", "model": "lilicorr",
                                       "num_speculative_tokens": 3},
                                      "cannot serve method 'eagle3'; use \"method\":\"lilicorr\""),
    "lilicorr checkpoint as mtp": ({"method": "mtp", "model": "lilicorr",
                                    "num_speculative_tokens": 1},
                                   "cannot serve method 'mtp'"),
    "bad lilicorr key": ({"method": "lilicorr", "model": "topk3"},
                         "lilicorr_candidate_topk=3 must be a power of two"),
    "vocabulary mismatch": ({"method": "lilicorr", "model": "vocab"},
                            "drafter vocabulary 4096 != target vocabulary"),
    "tap layer outside target": ({"method": "lilicorr", "model": "taps"},
                                 "target_layer_ids [9] are outside the target's"),
    "missing weights": ({"method": "lilicorr", "model": "missing"},
                        "lilicorr.out_head.weight"),
    "draft length = block size": ({"method": "lilicorr", "model": "lilicorr",
                                   "num_speculative_tokens": 8}, "outside 1..7"),
}


def run(code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=ENV)


def test_engine_config_refuses_each_bad_input(target, drafters):
    cases = {name: {**spec, "model": drafters[spec["model"]]}
             for name, (spec, _) in CASES.items()}
    result = run(f"""
        import json
        from vllm.engine.arg_utils import EngineArgs
        out = {{}}
        for name, spec in json.loads({json.dumps(json.dumps(cases))}).items():
            try:
                EngineArgs(model={str(target)!r}, dtype="float32", max_model_len=512,
                           speculative_config=spec).create_engine_config()
                out[name] = None
            except Exception as error:
                out[name] = [type(error).__name__, str(error)]
        print("RESULT", json.dumps(out))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.split("RESULT ", 1)[1])
    for name, (_, fragment) in CASES.items():
        assert got[name] is not None, f"{name}: accepted"
        kind, message = got[name]
        assert kind == "DrafterSpecError" and fragment in message and "\n" not in message, \
            (name, got[name])


@pytest.mark.slow
def test_llm_refuses_before_loading(target, drafters):
    result = run(f"""
        from vllm import LLM
        try:
            LLM(model={str(target)!r}, dtype="float32", max_model_len=512,
                speculative_config={{"method": "lilicorr", "model": {drafters['dflash']!r}}})
        except ValueError as error:
            print("REFUSED", error)
    """)
    assert "REFUSED" in result.stdout and 'use "method":"dflash"' in result.stdout, result.stderr
    assert "Loading weights" not in result.stdout + result.stderr


@pytest.mark.slow
def test_vllm_serve_exits_with_one_line_before_loading(target, drafters):
    spec = json.dumps({"method": "lilicorr", "model": drafters["topk3"]})
    result = subprocess.run([str(driver.VLLM), "serve", str(target), "--dtype", "float32",
                             "--speculative-config", spec, "--port", str(free_port(driver.HTTP_PORTS))],
                            capture_output=True, text=True, timeout=600, env=ENV)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("blockdraft.specs.DrafterSpecError: ") and \
        "lilicorr_candidate_topk=3 must be a power of two" in last, last
    assert "Loading weights" not in result.stdout + result.stderr
