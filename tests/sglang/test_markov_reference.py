"""blockdraft's Markov block decoding equals SGLang 0.5.23's ``draft_markov_block`` (greedy) on
the same Markov head weights: the trained DSpark fixture's, or seeded random ones."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from blockdraft.markov import VanillaMarkovHead, markov_block_decode

FIXTURE = Path(__file__).resolve().parents[2] / "build/fixtures/qwen3/dspark/model.safetensors"


def heads(weights: dict[str, torch.Tensor]):
    from sglang.srt.models.dspark import VanillaMarkov

    w1, w2 = weights["markov_head.markov_w1.weight"], weights["markov_head.markov_w2.weight"]
    ours = VanillaMarkovHead(vocab_size=w1.shape[0], rank=w1.shape[1])
    theirs = VanillaMarkov(vocab_size=w1.shape[0], markov_rank=w1.shape[1])
    for head in (ours, theirs):
        head.markov_w1.weight.data.copy_(w1)
        head.markov_w2.weight.data.copy_(w2)
    return ours, theirs


def sglang_greedy_block(head, base_logits: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    from sglang.srt.speculative.dspark_components.dspark_draft import DraftNoise, draft_markov_block
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

    single_rank = SimpleNamespace(world_size=1, rank_in_group=0)  # the TP group of one process
    tokens, _ = draft_markov_block(
        markov_head=head, base_logits=base_logits, anchor_tokens=anchors, draft_hidden=None,
        step_temperatures=torch.zeros(base_logits.shape[0]),
        noise=DraftNoise(key=0, offset=torch.zeros(1, dtype=torch.int64)),
        tp_sync=SpecTpSync(single_rank), greedy_draft=True)
    return tokens


@pytest.mark.parametrize("batch", [1, 5])  # batch 1 takes SGLang's fused greedy step
def test_trained_head_drafts_like_sglang(batch):
    if not FIXTURE.exists():
        pytest.fail(f"{FIXTURE} missing: run ci/setup.sh")
    ours, theirs = heads(load_file(str(FIXTURE)))
    torch.manual_seed(batch)
    vocab = ours.markov_w1.weight.shape[0]
    # flat base logits, so that the Markov bias decides some drafts
    base = torch.randn(batch, 9, vocab) * 0.5
    anchors = torch.randint(0, vocab, (batch,))
    expected = sglang_greedy_block(theirs, base, anchors)
    got = markov_block_decode(ours, base, anchors)
    assert torch.equal(got, expected)
    # the bias matters: without it the drafts differ somewhere
    assert not torch.equal(base.argmax(-1), expected)


def test_random_head_drafts_like_sglang():
    torch.manual_seed(0)
    weights = {"markov_head.markov_w1.weight": torch.randn(300, 16),
               "markov_head.markov_w2.weight": torch.randn(300, 16)}
    ours, theirs = heads(weights)
    base = torch.randn(4, 7, 300)
    anchors = torch.tensor([1, 2, 3, 299])
    assert torch.equal(markov_block_decode(ours, base, anchors),
                       sglang_greedy_block(theirs, base, anchors))
