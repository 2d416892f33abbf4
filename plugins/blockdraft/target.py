"""A transformers causal LM seen as a speculative-decoding target: logits and tap states.

A tap ``i`` is the residual stream after decoder layer ``i`` (HF ``hidden_states[i + 1]``),
the convention of ``target_layer_ids`` in vLLM, SGLang and llama.cpp. Works for text models
and for the language model inside a vision-language model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .drafter import TargetHeads


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if layers is None:  # VL models: the decoder is the language model's wrapper
        layers = decoder.language_model.layers
    return layers


class TapRecorder:
    """Forward hooks that keep the outputs of the tap layers during one forward."""

    def __init__(self, model: nn.Module, tap_layer_ids: Sequence[int]) -> None:
        layers = decoder_layers(model)
        self.tap_layer_ids = tuple(tap_layer_ids)
        self._outputs: dict[int, torch.Tensor] = {}
        for i in self.tap_layer_ids:
            layers[i].register_forward_hook(self._keeper(i))

    def _keeper(self, index: int):
        def keep(_module, _inputs, output):
            self._outputs[index] = output[0] if isinstance(output, tuple) else output
        return keep

    def taps(self) -> torch.Tensor:
        """[B, T, n_taps * H] in tap order, from the last forward."""
        return torch.cat([self._outputs.pop(i) for i in self.tap_layer_ids], dim=-1)


class HFTarget:
    def __init__(self, model: nn.Module, tap_layer_ids: Sequence[int]) -> None:
        self.model = model.eval()
        self.recorder = TapRecorder(model, tap_layer_ids)
        self.heads = TargetHeads(model.get_input_embeddings(),
                                 model.get_output_embeddings().weight)

    @classmethod
    def from_pretrained(cls, path, tap_layer_ids: Sequence[int]) -> "HFTarget":
        """A float32 target from a Hugging Face checkpoint folder."""
        from transformers import AutoModelForCausalLM

        return cls(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tap_layer_ids)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [B, T, V] and tap states [B, T, n*H] for input_ids [B, T]."""
        logits = self.model(input_ids=input_ids, use_cache=False, **inputs).logits
        return logits.float(), self.recorder.taps()
