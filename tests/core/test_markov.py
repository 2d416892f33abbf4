"""DSpark's greedy Markov block decoding (our own logic, plain torch)."""

from __future__ import annotations

import torch

from blockdraft.markov import VanillaMarkovHead, markov_block_decode


def test_each_step_is_biased_by_the_token_chosen_before():
    torch.manual_seed(0)
    head = VanillaMarkovHead(vocab_size=50, rank=4)
    base = torch.randn(3, 6, 50)
    anchors = torch.tensor([1, 2, 3])
    drafts = markov_block_decode(head, base, anchors)
    for row in range(3):
        prev = anchors[row]
        for step in range(6):
            expected = (base[row, step] + head.markov_w2(head.markov_w1(prev))).argmax()
            assert drafts[row, step] == expected
            prev = expected


def test_zero_bias_is_the_parallel_argmax():
    head = VanillaMarkovHead(vocab_size=20, rank=2)
    torch.nn.init.zeros_(head.markov_w2.weight)
    base = torch.randn(2, 5, 20)
    assert torch.equal(markov_block_decode(head, base, torch.tensor([0, 1])), base.argmax(-1))


def test_bias_can_change_the_draft():
    head = VanillaMarkovHead(vocab_size=4, rank=1)
    with torch.no_grad():
        head.markov_w1.weight.copy_(torch.tensor([[0.0], [1.0], [0.0], [0.0]]))
        head.markov_w2.weight.copy_(torch.tensor([[0.0], [0.0], [0.0], [10.0]]))
    base = torch.tensor([[[0.0, 1.0, 0.5, 0.0], [0.0, 1.0, 0.5, 0.0]]])
    # step 0 after anchor 0: no bias -> token 1; step 1 after token 1: bias favours token 3
    assert markov_block_decode(head, base, torch.tensor([0])).tolist() == [[1, 3]]
