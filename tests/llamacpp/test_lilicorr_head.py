"""llama.cpp's LiLiCorr head and walk match the project's reference on the same weights.

The server is given the LiLiCorr GGUF with -md alone, so it must also detect a draft-dflash
drafter with the LiLiCorr head and say so. With its debug log on it prints every drafted
position's candidate ids, transition scores and the token the walk chose. The reference
(blockdraft: the target in transformers, the drafter's DFlash pass, LiLiCorrHead, greedy_walk)
computes the same lattice from the Hugging Face checkpoints the GGUFs were converted from.

Tolerance: candidate ids and the drafted tokens must be identical; scores (logit_scale x cosine)
may differ by at most 1e-4 absolute. With f32 KV caches and no flash attention both sides
compute in fp32 (measured difference ~1e-5 on scores up to ~2), and the GGUFs are F32.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.conformance.prompts import prompt_set

from .conftest import complete, llama_server

pytestmark = pytest.mark.slow

SCORE_ATOL = 1e-4
DRAFTS = 3  # drafts checked per prompt
LATTICE_LINE = re.compile(r"draft lattice pos +(\d+): candidates and scores(( -?[0-9.e+-]+)+) -> (\d+)")


@pytest.fixture(scope="module")
def reference(hf_fixture):
    from transformers import AutoModelForCausalLM

    from blockdraft.drafter import load_drafter
    from blockdraft.specs import read_drafter_spec
    from blockdraft.target import HFTarget

    target_model = AutoModelForCausalLM.from_pretrained(hf_fixture("qwen3", "target"), dtype=torch.float32)
    spec = read_drafter_spec(hf_fixture("qwen3", "lilicorr"))
    target = HFTarget(target_model, spec.backbone.target_layer_ids)
    drafter = load_drafter(hf_fixture("qwen3", "lilicorr"), target_hidden_size=target_model.config.hidden_size)
    return target, drafter, spec


def reference_lattice(reference, context: list[int], anchor_token: int, num_draft: int):
    """Candidate ids [S, k], transition scores [S, k, k] and drafted tokens [S] of the block
    drafted after context (whose last token is the anchor) with anchor_token at position 0."""
    from blockdraft.lattice import greedy_walk

    target, drafter, spec = reference
    with torch.no_grad():
        _, taps = target(torch.tensor([context]))
        hidden = drafter.block_hidden(target.heads, taps, torch.tensor([anchor_token]), num_draft)
        log_probs = (hidden @ target.heads.lm_head_weight.T).float().log_softmax(dim=-1)
        cand_log_probs, cand_ids = log_probs.topk(spec.lilicorr.candidate_topk, dim=-1)
        scores = drafter.lilicorr(target.heads.embed_tokens(cand_ids), cand_log_probs, hidden,
                                  drafter.anchor_state(taps[:, -1]), torch.ones(1, dtype=torch.bool))
        path = greedy_walk(scores)
    return cand_ids[0], scores[0], cand_ids[0].gather(1, path[0][:, None]).squeeze(1)


def logged_drafts(log: str, num_draft: int) -> list[list[re.Match]]:
    """The logged lattices, one list of num_draft position lines per full draft."""
    lines = [LATTICE_LINE.search(line) for line in log.splitlines() if "draft lattice pos" in line]
    drafts, current = [], []
    for m in lines:
        if int(m.group(1)) == 0:
            current = []
            drafts.append(current)
        current.append(m)
    return [d for d in drafts if len(d) == num_draft]


def test_head_matches_reference(gguf, reference):
    """The first DRAFTS drafts of two prompts: the first one follows the prompt; each later one
    follows what the target accepted, so it also checks which target features become the anchor
    after a verification and that rejected rows left the draft's cache."""
    _, _, spec = reference
    k = spec.lilicorr.candidate_topk
    num_draft = spec.backbone.block_size - 1
    checked, accepted_counts = 0, []
    with llama_server("lilicorr-lattice", "-m", gguf("qwen3", "target"), "-md", gguf("qwen3", "lilicorr"),
                      "-v") as server:
        log = server.log_path.read_text
        assert "adding speculative implementation 'draft-dflash'" in log()
        assert f"LiLiCorr head: greedy walk over the top-{k} candidates" in log()
        for request in prompt_set("in_domain")[:2]:
            prompt = list(request.prompt_ids)
            seen = len(logged_drafts(log(), num_draft))
            generated = complete(server, prompt, DRAFTS * (num_draft + 1) + 2)["tokens"]
            drafts = logged_drafts(log(), num_draft)[seen:seen + DRAFTS]
            assert len(drafts) == DRAFTS, "fewer full drafts than expected in the log"

            n_done = 0  # generated tokens before the draft; the next one is the draft's anchor token
            for draft in drafts:
                rows = torch.tensor([[float(x) for x in m.group(2).split()] for m in draft])
                ids, scores = rows[:, :k].long(), rows[:, k:].reshape(num_draft, k, k)
                drafted = [int(m.group(4)) for m in draft]

                ref_ids, ref_scores, ref_drafted = reference_lattice(
                    reference, prompt + generated[:n_done], generated[n_done], num_draft)
                assert torch.equal(ids, ref_ids), f"candidates differ:\n{ids}\n{ref_ids}"
                diff = (scores - ref_scores).abs().max().item()
                assert diff <= SCORE_ATOL, f"scores differ by {diff:.2e} (range {ref_scores.abs().max():.2f})"
                assert drafted == ref_drafted.tolist()
                checked += 1

                # the target accepts the drafted prefix it agrees with, then adds its own token
                accepted = 0
                while accepted < num_draft and drafted[accepted] == generated[n_done + 1 + accepted]:
                    accepted += 1
                n_done += accepted + 1
                accepted_counts.append(accepted)
    assert checked == DRAFTS * 2
    print(f"drafted tokens accepted per checked draft: {accepted_counts}")
