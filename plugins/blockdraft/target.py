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


class CachedHFTarget(HFTarget):
    """An HFTarget that keeps its KV cache between calls on one sequence (batch 1): a call
    whose input extends, or departs from, the last one runs only the tokens after their
    common prefix. The reference loop's calls do exactly that (a rejected draft departs), so
    it measures large targets at the cost of their new tokens, not of the whole sequence."""

    def __init__(self, model: nn.Module, tap_layer_ids: Sequence[int]) -> None:
        super().__init__(model, tap_layer_ids)
        self._ids: list[int] = []
        self._cache = None
        self._logits = self._taps = None

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
        if input_ids.shape[0] != 1 or inputs:
            raise ValueError("CachedHFTarget runs one text sequence at a time")
        ids = input_ids[0].tolist()
        common = 0
        for old, new in zip(self._ids, ids[:-1]):  # at least the last token runs again
            if old != new:
                break
            common += 1
        if common == 0:
            from transformers import DynamicCache
            self._cache, self._logits, self._taps = DynamicCache(), None, None
        else:
            if len(self._ids) > common:
                self._cache.crop(common - len(self._ids))  # drop what departs
            self._logits, self._taps = self._logits[:, :common], self._taps[:, :common]
        logits = self.model(input_ids=input_ids[:, common:], past_key_values=self._cache,
                            use_cache=True).logits.float()
        taps = self.recorder.taps()
        self._ids = ids
        self._logits = logits if common == 0 else torch.cat([self._logits, logits], dim=1)
        self._taps = taps if common == 0 else torch.cat([self._taps, taps], dim=1)
        return self._logits, self._taps
