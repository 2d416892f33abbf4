"""Bad input gets one line naming cause and fix, through vLLM's own entry points and before any
model loads: engine config (what `LLM(...)` and `vllm serve` build), `LLM(...)`, `vllm serve`."""

from __future__ import annotations

import json
import os
import shutil
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
        "mtp": str(write_checkpoint(root / "mtp", drafter_config("DeepSeekMTPModel"),
                                    names=["model.layers.0.eh_proj.weight"])),
        "topk3": str(write_checkpoint(root / "topk3", drafter_config(lilicorr_candidate_topk=3),
                                      names=["x"])),
        "vocab": str(write_checkpoint(root / "vocab", {**drafter_config(), "vocab_size": 4096})),
        "taps": str(write_checkpoint(root / "taps", drafter_config(target_layer_ids=[0, 9]))),
        "missing": str(write_checkpoint(root / "missing", drafter_config(),
                                        drop=["lilicorr.out_head.weight"])),
        "truncated": str(truncated_copy(lilicorr, root / "truncated")),
        "dspark": str(driver.FIXTURES / "qwen3" / "dspark"),
        "topk32": str(write_checkpoint(root / "topk32", drafter_config(lilicorr_candidate_topk=32),
                                       names=["x"])),
        "block0": str(write_checkpoint(root / "block0", drafter_config(block_size=0), names=["x"])),
    }


def truncated_copy(source, folder):
    """The drafter as an interrupted copy leaves it: the weights file cut short."""
    shutil.copytree(source, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4096])
    return folder


CASES = {
    "dflash checkpoint as lilicorr": ({"method": "lilicorr", "model": "dflash"},
                                      "is a dflash checkpoint; use \"method\":\"dflash\""),
    "eagle3 checkpoint as lilicorr": ({"method": "lilicorr", "model": "eagle3"},
                                      "is a eagle3 checkpoint; use \"method\":\"eagle3\""),
    "mtp checkpoint as lilicorr": ({"method": "lilicorr", "model": "mtp"},
                                   "is a mtp checkpoint; use \"method\":\"mtp\""),
    "lilicorr checkpoint as eagle3": ({"method": "eagle3", "model": "lilicorr",
                                       "num_speculative_tokens": 3},
                                      "cannot serve method 'eagle3'; use \"method\":\"lilicorr\""),
    "lilicorr checkpoint as mtp": ({"method": "mtp", "model": "lilicorr",
                                    "num_speculative_tokens": 1},
                                   "cannot serve method 'mtp'"),
    "dspark checkpoint as lilicorr": ({"method": "lilicorr", "model": "dspark"},
                                      "is a dspark checkpoint; use \"method\":\"dspark\""),
    "bad lilicorr key": ({"method": "lilicorr", "model": "topk3"},
                         "lilicorr_candidate_topk=3 must be a power of two"),
    "candidate_topk 32": ({"method": "lilicorr", "model": "topk32"},
                          "lilicorr_candidate_topk=32 must be a power of two <= 16"),
    "block size 0": ({"method": "lilicorr", "model": "block0"}, "block_size=0 must be an integer >= 1"),
    "vocabulary mismatch": ({"method": "lilicorr", "model": "vocab"},
                            "drafter vocabulary 4096 != target vocabulary"),
    "tap layer outside target": ({"method": "lilicorr", "model": "taps"},
                                 "target_layer_ids [9] are outside the target's"),
    "missing weights": ({"method": "lilicorr", "model": "missing"},
                        "lilicorr.out_head.weight"),
    "truncated weights": ({"method": "lilicorr", "model": "truncated"},
                          "the file is truncated or corrupted, copy it again"),
    "draft length = block size": ({"method": "lilicorr", "model": "lilicorr",
                                   "num_speculative_tokens": 8}, "outside 1..7"),
}


def run(code: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=ENV)


def test_engine_config_refuses_each_bad_input(target, drafters, reliability):
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
        reliability("vllm", name, f"refused before loading: {kind}: {message}")
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
def test_vllm_serve_exits_with_one_line_before_loading(target, drafters, reliability):
    spec = json.dumps({"method": "lilicorr", "model": drafters["topk3"]})
    result = subprocess.run([str(driver.VLLM), "serve", str(target), "--dtype", "float32",
                             "--speculative-config", spec, "--port", str(free_port(driver.HTTP_PORTS))],
                            capture_output=True, text=True, timeout=600, env=ENV)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    reliability("vllm", "`vllm serve` with candidate_topk 3",
                f"exit {result.returncode} before loading: {last}")
    assert last.startswith("blockdraft.specs.DrafterSpecError: ") and \
        "lilicorr_candidate_topk=3 must be a power of two" in last, last
    assert "Loading weights" not in result.stdout + result.stderr
