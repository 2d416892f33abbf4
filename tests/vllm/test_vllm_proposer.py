"""LiLiCorrProposer's own steps, on stand-in engine objects: anchors and drafted tokens."""

from types import SimpleNamespace

import pytest
import torch

from blockdraft.lattice import greedy_walk
from vllm_lilicorr.proposer import LiLiCorrProposer

K, TOPK, VOCAB, HIDDEN = 3, 4, 50, 8


def cad(query_start_loc):
    loc = torch.tensor(query_start_loc, dtype=torch.int32)
    return SimpleNamespace(query_start_loc=loc, batch_size=lambda: len(loc) - 1)


def make(transition_logits=None, candidate_ids=None, probabilistic=False):
    model = SimpleNamespace(model=SimpleNamespace(hidden_norm=lambda x: 2 * x))
    if candidate_ids is not None:
        model.compute_candidates = lambda h: (candidate_ids.reshape(-1, TOPK),
                                              torch.zeros(candidate_ids.numel() // TOPK, TOPK))
    p = SimpleNamespace(
        model=model, drafts_lattice=True, gather_full_logits=False, num_speculative_tokens=K,
        _enable_probabilistic_draft_probs=probabilistic,
        target_embeddings=lambda ids: torch.zeros(*ids.shape, HIDDEN),
        lattice_head=lambda *args: transition_logits,
        _anchor_hidden=None, _anchor_valid=None,
        vllm_config=SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB)))
    p._candidates = lambda h: LiLiCorrProposer._candidates(p, h)
    return p


@pytest.mark.parametrize("rejected", [None, [0, 2, 1]])
def test_anchor_is_the_last_accepted_target_state(rejected):
    hidden = torch.arange(10.0)[:, None].expand(10, HIDDEN)  # row i holds i
    p = make()
    num_rejected = None if rejected is None else torch.tensor(rejected, dtype=torch.int32)
    LiLiCorrProposer._take_anchors(p, hidden, cad([0, 4, 7, 10]), num_rejected)
    last = [3, 6, 9] if rejected is None else [3, 4, 8]
    assert p._anchor_hidden[:, 0].tolist() == [2.0 * i for i in last]  # hidden_norm applied
    assert p._anchor_valid.tolist() == [True, True, True]


def test_request_with_nothing_accepted_has_no_anchor():
    hidden = torch.ones(6, HIDDEN)
    p = make()
    LiLiCorrProposer._take_anchors(p, hidden, cad([0, 3, 6]), torch.tensor([0, 3]))
    assert p._anchor_valid.tolist() == [True, False]
    assert p._anchor_hidden[1].abs().sum() == 0


def test_greedy_drafts_follow_the_walk_through_the_candidates():
    torch.manual_seed(0)
    candidates = torch.randint(0, VOCAB, (2, K, TOPK))
    logits = torch.randn(2, K, TOPK, TOPK)
    p = make(logits, candidates)
    tokens, probs = LiLiCorrProposer._sample_draft_tokens(
        p, torch.zeros(2 * K, HIDDEN), SimpleNamespace(all_greedy=True))
    expected = candidates.gather(-1, greedy_walk(logits).unsqueeze(-1)).view(-1)
    assert probs is None and torch.equal(tokens, expected)


def test_probabilistic_drafts_hand_over_their_proposal():
    torch.manual_seed(1)
    candidates = torch.stack([torch.randperm(VOCAB)[:TOPK] for _ in range(2 * K)]).view(2, K, TOPK)
    logits = torch.randn(2, K, TOPK, TOPK)
    p = make(logits, candidates, probabilistic=True)
    meta = SimpleNamespace(all_greedy=False, temperature=torch.tensor([0.7, 0.0]))
    tokens, probs = LiLiCorrProposer._sample_draft_tokens(p, torch.zeros(2 * K, HIDDEN), meta)
    assert probs.shape == (2 * K, VOCAB)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2 * K))
    flat = candidates.view(2 * K, TOPK)
    outside = probs.clone().scatter_(1, flat, 0.0)
    assert outside.abs().sum() == 0  # mass only on each slot's candidates
    assert (probs.gather(1, tokens[:, None]) > 0).all()  # every drafted token was proposable
    greedy = candidates.gather(-1, greedy_walk(logits).unsqueeze(-1)).view(2, K)[1]
    assert torch.equal(tokens.view(2, K)[1], greedy)  # the temperature-0 request stays greedy
