"""sample_walk: the probabilistic LiLiCorr path and the proposal it hands the rejection sampler."""

import torch

from blockdraft.lattice import greedy_walk, sample_walk


def test_greedy_rows_follow_greedy_walk_with_one_hot_proposals():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 4, 4) * 3
    path, proposal = sample_walk(logits, torch.zeros(5))
    assert torch.equal(path, greedy_walk(logits))
    assert torch.equal(proposal, torch.nn.functional.one_hot(path, 4).float())


def test_proposal_is_the_softmax_of_the_row_the_walk_stood_on():
    torch.manual_seed(1)
    logits = torch.randn(3, 6, 4, 4)
    temperature = torch.tensor([0.5, 1.0, 2.0])
    path, proposal = sample_walk(logits, temperature)
    previous = torch.zeros(3, dtype=torch.long)
    for slot in range(6):
        row = logits[torch.arange(3), slot, previous]
        torch.testing.assert_close(proposal[:, slot], (row / temperature[:, None]).softmax(-1))
        previous = path[:, slot]


def test_draws_follow_the_proposal():
    torch.manual_seed(2)
    logits = torch.randn(1, 2, 4, 4)
    draws = 20000
    path, _ = sample_walk(logits.expand(draws, -1, -1, -1), torch.full((draws,), 0.7))
    # first slot: softmax of the start row; second slot given the first: its row's softmax
    expected_first = (logits[0, 0, 0] / 0.7).softmax(-1)
    observed_first = torch.bincount(path[:, 0], minlength=4).float() / draws
    torch.testing.assert_close(observed_first, expected_first, atol=0.015, rtol=0)
    picked = path[:, 0] == 0
    expected_second = (logits[0, 1, 0] / 0.7).softmax(-1)
    observed_second = torch.bincount(path[picked, 1], minlength=4).float() / picked.sum()
    torch.testing.assert_close(observed_second, expected_second, atol=0.03, rtol=0)


def test_mixed_batch_keeps_greedy_rows_greedy():
    torch.manual_seed(3)
    logits = torch.randn(4, 5, 4, 4)
    temperature = torch.tensor([0.0, 1.0, 0.0, 1.0])
    path, _ = sample_walk(logits, temperature)
    greedy = greedy_walk(logits)
    assert torch.equal(path[0], greedy[0]) and torch.equal(path[2], greedy[2])
