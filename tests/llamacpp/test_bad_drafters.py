"""A drafter the target cannot feed is one clear error, and the server never serves without the
speculative decoding it was asked for (patches 0006 and 0007)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.conformance.drivers.base import REPO

from .conftest import refusal, refused

pytestmark = pytest.mark.slow


def with_target_layers(source, destination, layers: list[int]):
    """A copy of a DFlash-family GGUF whose dflash.target_layers (llama.cpp numbering: the input of
    layer k, i.e. the output of Hugging Face layer k - 1) are LAYERS."""
    sys.path.append(str(REPO / "build/llama.cpp/gguf-py"))  # the tree's gguf-py (it has a tests/ too)
    from gguf import GGUFReader

    shutil.copy(source, destination)
    reader = GGUFReader(destination, "r+")
    field = reader.get_field("dflash.target_layers")
    assert len(field.data) == len(layers)
    for index, layer in zip(field.data, layers):
        field.parts[index][0] = layer
    reader.data.flush()
    return destination


@pytest.mark.parametrize("layer", [4, 5], ids=["last-layer-output", "past-the-target"])
def test_tap_the_target_does_not_expose(layer, gguf, tmp_path, reliability):
    """The qwen3 fixture target has 4 layers; its graph exposes the inputs of layers 0-3 only."""
    drafter = with_target_layers(gguf("qwen3", "dflash"), tmp_path / "dflash.gguf", [1, 2, layer])
    code, log = refused(f"tap-{layer}", "-m", gguf("qwen3", "target"), "-md", drafter)
    assert code == 1, log[-2000:]
    assert (f"the draft model taps target layer {layer} ({layer - 1} in its Hugging Face target_layer_ids), "
            f"but the qwen3 model does not expose the input of layer {layer} (it has 4 layers); "
            "use a draft model trained for this target" in log), log[-2000:]
    assert "remove the speculative decoding options to serve without it" in log
    reliability("llamacpp", f"a drafter tapping target layer {layer} of a 4-layer target",
                refusal(code, log, "the draft model taps"))


def cut_copy(source, destination):
    """A copy as an interrupted download leaves it (the last 4 KiB missing)."""
    destination.write_bytes(source.read_bytes()[:-4096])
    return destination


@pytest.mark.parametrize("role", ["target", "lilicorr"])
def test_truncated_gguf_is_refused(role, gguf, tmp_path, reliability):
    cut = cut_copy(gguf("qwen3", role), tmp_path / f"{role}.gguf")
    models = (["-m", cut] if role == "target"
              else ["-m", gguf("qwen3", "target"), "--spec-type", "draft-dflash", "-md", cut])
    code, log = refused(f"truncated-{role}", *models)
    assert code == 1, log[-2000:]
    assert "data is not within the file bounds, model is corrupted or incomplete" in log, log[-2000:]
    reliability("llamacpp", f"truncated {role} GGUF", refusal(code, log, "not within the file bounds"))


def test_corrupted_gguf_header_is_refused(gguf, tmp_path, reliability):
    source = gguf("qwen3", "lilicorr")
    data = bytearray(source.read_bytes())
    data[100:200] = b"\xff" * 100  # inside the key-value section
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    code, log = refused("corrupted-header", "-m", gguf("qwen3", "target"), "--spec-type",
                        "draft-dflash", "-md", tmp_path / "bad.gguf")
    assert code == 1, log[-2000:]
    assert "failed to read key-value pairs" in log and "failed to load model" in log, log[-2000:]
    reliability("llamacpp", "drafter GGUF with a corrupted header",
                refusal(code, log, "failed to read key-value pairs"))


def test_negative_draft_length_is_refused(gguf, reliability):
    code, log = refused("negative-n-max", "-m", gguf("qwen3", "target"), "--spec-type",
                        "draft-dflash", "-md", gguf("qwen3", "lilicorr"), "--spec-draft-n-max", "-1")
    assert code == 1, log[-2000:]
    assert 'error while handling argument "--spec-draft-n-max": invalid value' in log, log[-2000:]
    reliability("llamacpp", "negative draft length (--spec-draft-n-max -1)",
                refusal(code, log, "--spec-draft-n-max"))
