"""A drafter the target cannot feed is one clear error, and the server never serves without the
speculative decoding it was asked for (patches 0006 and 0007)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.conformance.drivers.base import REPO

from .conftest import refused

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
def test_tap_the_target_does_not_expose(layer, gguf, tmp_path):
    """The qwen3 fixture target has 4 layers; its graph exposes the inputs of layers 0-3 only."""
    drafter = with_target_layers(gguf("qwen3", "dflash"), tmp_path / "dflash.gguf", [1, 2, layer])
    code, log = refused(f"tap-{layer}", "-m", gguf("qwen3", "target"), "-md", drafter)
    assert code == 1, log[-2000:]
    assert (f"the draft model taps target layer {layer} ({layer - 1} in its Hugging Face target_layer_ids), "
            f"but the qwen3 model does not expose the input of layer {layer} (it has 4 layers); "
            "use a draft model trained for this target" in log), log[-2000:]
    assert "remove the speculative decoding options to serve without it" in log
