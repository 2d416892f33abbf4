"""llama-server with DFlash, LiLiCorr and DSpark drafters is lossless and really speculates.

Every case runs the target alone and with a drafter in the same build and compares the greedy
token ids of in-domain prompts; every comparison also demands that drafts were proposed, and
the trained fixtures must reach an acceptance length of 3 (tokens per target decode step).
"""

from __future__ import annotations

import base64
import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from llama_server import Completion, LlamaServer, acceptance_length, start_server

pytestmark = pytest.mark.slow

N_PREDICT = 64
# image prompts for the vision-language target: "{image}" is where the image goes
IMAGE_PROMPTS = [
    "<|im_start|>user\n{image}\ndef draw(canvas):<|im_end|>\n<|im_start|>assistant\n",
    "{image}\nclass Picture:\n    def __init__(self, width, height):\n",
]


@dataclass(frozen=True)
class Case:
    target: str
    drafter: tuple[str, str]  # (target, role) of the drafter's checkpoint
    args: tuple[str, ...]     # speculative arguments; "{drafter}" is the drafter's GGUF
    parallel: int = 1         # -np; above 1 the prompts are sent concurrently


CASES = {
    # the users' command: LiLiCorr through draft-dflash
    "qwen3-lilicorr": Case("qwen3", ("qwen3", "lilicorr"), ("--spec-type", "draft-dflash", "--spec-draft-model", "{drafter}")),
    # the drafter type detected from the GGUF, with -md alone
    "qwen3-lilicorr-md": Case("qwen3", ("qwen3", "lilicorr"), ("-md", "{drafter}")),
    "qwen3-lilicorr-np2": Case("qwen3", ("qwen3", "lilicorr"), ("-md", "{drafter}"), parallel=2),
    # the control: the same backbone without the head, llama.cpp's own DFlash path
    "qwen3-dflash": Case("qwen3", ("qwen3", "dflash"), ("-md", "{drafter}")),
    "qwen3-dspark": Case("qwen3", ("qwen3", "dspark"), ("-md", "{drafter}", "--spark-block-size", "8")),
    # hybrid short-conv target: partial acceptance rolls the recurrent state back
    "lfm2-dspark": Case("lfm2", ("lfm2", "dspark"), ("-md", "{drafter}", "--spark-block-size", "8")),
    "lfm2-dspark-np2": Case("lfm2", ("lfm2", "dspark"), ("-md", "{drafter}", "--spark-block-size", "8"), parallel=2),
    "lfm2-dflash": Case("lfm2", ("lfm2", "dflash"), ("-md", "{drafter}")),
    # the users' image command; LFM2-VL's language model is the LFM2 target, so LFM2's drafter
    # serves it and the image positions reach it through the target's hidden states
    "lfm2_vl-dspark": Case("lfm2_vl", ("lfm2", "dspark"), ("-md", "{drafter}", "--spark-block-size", "8")),
}


def image_b64() -> str:
    """A deterministic 96 x 128 RGB image, base64 PNG."""
    from PIL import Image

    image = Image.new("RGB", (128, 96))
    image.putdata([((x * 2) % 256, (y * 3) % 256, ((x ^ y) * 5) % 256) for y in range(96) for x in range(128)])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def case_prompts(server: LlamaServer, target: str, prompts: list[str]) -> list:
    if target != "lfm2_vl":
        return prompts
    marker = server.props()["media_marker"]
    image = image_b64()
    return [{"prompt_string": p.replace("{image}", marker), "multimodal_data": [image]} for p in IMAGE_PROMPTS]


def target_args(gguf, target: str) -> list:
    args = ["-m", gguf(target, "target")]
    if target == "lfm2_vl":
        args += ["--mmproj", gguf(target, "mmproj")]
    return args


def run_prompts(server, prompts: list, parallel: int) -> list[Completion]:
    if parallel == 1:
        return [server.complete(p, n_predict=N_PREDICT) for p in prompts]
    with ThreadPoolExecutor(parallel * 2) as pool:
        return list(pool.map(lambda p: server.complete(p, n_predict=N_PREDICT), prompts))


@pytest.fixture(scope="module")
def baseline(request, gguf, prompts):
    """The target's own greedy outputs, per target, from a server without a drafter."""
    outputs: dict[str, list[list[int]]] = {}

    def get(target: str) -> list[list[int]]:
        if target not in outputs:
            server = start_server(request, f"{target}-plain", *target_args(gguf, target))
            outputs[target] = [c.tokens for c in run_prompts(server, case_prompts(server, target, prompts), 1)]
            server.stop()
        return outputs[target]
    return get


@pytest.fixture(scope="module")
def speculative(request, gguf, prompts):
    """The completions of a case's server, run once per module."""
    results: dict[str, tuple[list[Completion], str]] = {}

    def get(name: str) -> tuple[list[Completion], str]:
        if name not in results:
            case = CASES[name]
            drafter = str(gguf(*case.drafter))
            args = [a.replace("{drafter}", drafter) for a in case.args]
            server = start_server(request, name, *target_args(gguf, case.target),
                                  "-np", str(case.parallel), *args)
            results[name] = (run_prompts(server, case_prompts(server, case.target, prompts), case.parallel),
                             server.log_text())
            server.stop()
        return results[name]
    return get


@pytest.mark.parametrize("name", CASES)
def test_lossless_and_drafting(name, baseline, speculative):
    case = CASES[name]
    completions, log = speculative(name)
    expected = baseline(case.target)
    for i, (completion, reference) in enumerate(zip(completions, expected)):
        assert completion.tokens == reference, (
            f"prompt {i}: first divergence at token "
            f"{next(j for j, (a, b) in enumerate(zip(completion.tokens, reference)) if a != b)}")
        assert completion.draft_n > 0, f"prompt {i}: no drafts proposed"
    assert "adding speculative implementation 'draft-" in log


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n].drafter[1] == "lilicorr"])
def test_lilicorr_head_is_used(name, speculative):
    _, log = speculative(name)
    assert "LiLiCorr head: greedy walk over the top-" in log


@pytest.mark.parametrize("name", CASES)
def test_acceptance_floor(name, speculative, trained_floor):
    completions, _ = speculative(name)
    al = acceptance_length(completions)
    print(f"{name}: acceptance length {al:.2f}, "
          f"{sum(c.draft_n_accepted for c in completions)}/{sum(c.draft_n for c in completions)} drafted tokens accepted")
    if trained_floor is None:
        pytest.skip(f"untrained stand-ins (acceptance length {al:.2f}): no floor")
    assert al >= trained_floor


def test_lilicorr_at_least_dflash(speculative, trained_floor):
    """The LiLiCorr head is meant to beat its own backbone's plain DFlash drafts."""
    lilicorr = acceptance_length(speculative("qwen3-lilicorr")[0])
    dflash = acceptance_length(speculative("qwen3-dflash")[0])
    print(f"acceptance length: LiLiCorr {lilicorr:.2f}, DFlash {dflash:.2f}")
    if trained_floor is None:
        pytest.skip("untrained stand-ins: the comparison means nothing")
    assert lilicorr >= dflash


# The users' documents, as written (only --port added, and the fixtures' paths): default
# numerics (f16 KV caches, automatic flash attention) on both sides of the comparison.
DOCUMENTED = {
    "lilicorr": ("qwen3", ["--spec-type", "draft-dflash", "--spec-draft-model", ("qwen3", "lilicorr"),
                           "--host", "127.0.0.1"]),
    "dspark-image": ("lfm2_vl", ["-md", ("lfm2", "dspark"), "--spark-block-size", "8"]),
}


@pytest.mark.parametrize("name", DOCUMENTED)
def test_documented_command_as_written(request, name, gguf, prompts):
    target, spec_args = DOCUMENTED[name]
    spec_args = [str(gguf(*a)) if isinstance(a, tuple) else a for a in spec_args]
    runs = []
    for label, args in (("plain", []), ("spec", spec_args)):
        server = start_server(request, f"documented-{name}-{label}", *target_args(gguf, target), *args,
                              common_args=[])
        runs.append(run_prompts(server, case_prompts(server, target, prompts), 1))
        server.stop()
    plain, spec = runs
    for i, (completion, reference) in enumerate(zip(spec, plain)):
        assert completion.tokens == reference.tokens, f"prompt {i} differs"
        assert completion.draft_n > 0, f"prompt {i}: no drafts proposed"
