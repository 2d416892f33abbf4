"""The plain-torch chain rejection sampler (sampled DSPARK verifies on CPU) against SGLang's
Triton kernel itself, run by the Triton interpreter (``TRITON_INTERPRET=1``, in a subprocess:
the interpreter is chosen when ``triton`` is imported), on the same inputs and the same uniform
samples: identical ``predicts``, ``accept_index`` and ``accept_token_num``, untouched entries
included. Plus: the plugin rebinds the kernel's name in ``dspark_accept`` only, and only on CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from sglang_dspark.reject_sampling import chain_speculative_sampling
from sglang_servers import ROOT

SENTINEL = -7
OUTPUTS = ("predicts", "accept_index", "accept_token_num")
KINDS = ("random", "near", "full", "reject_first", "onehot_draft", "bad_q")


def _case(kind: str, seed: int, bs: int = 6, slots: int = 10, vocab: int = 300) -> dict:
    """Inputs shaped as dspark_accept passes them: slots = gamma + 1 (slot 0 = the anchor),
    draft rows = gamma, one uniform per draft."""
    g = torch.Generator().manual_seed(seed)
    draft_logits = torch.randn(bs, slots - 1, vocab, generator=g) * 2
    dp = torch.softmax(draft_logits, -1)
    drafts = torch.multinomial(dp.view(-1, vocab), 1, generator=g).view(bs, slots - 1)
    candidates = torch.cat((torch.randint(0, vocab, (bs, 1), generator=g), drafts), 1)
    tp = torch.softmax(torch.randn(bs, slots, vocab, generator=g) * 2, -1)
    rows = torch.arange(bs)[:, None]
    steps = torch.arange(slots - 1)[None, :]
    if kind == "near":  # target close to the draft: long, varied accepted prefixes
        noisy = draft_logits + 0.6 * torch.randn(bs, slots - 1, vocab, generator=g)
        tp[:, : slots - 1] = torch.softmax(noisy, -1)
    elif kind == "full":  # p == q on every draft row: u * q < p always, bonus from the target
        tp[:, : slots - 1] = dp
    elif kind == "reject_first":  # the first draft has no target mass: rejected at once
        tp[:, : slots - 1] = torch.softmax(draft_logits + 0.3 * torch.randn(
            bs, slots - 1, vocab, generator=g), -1)
        tp[rows[:, 0], 0, drafts[:, 0]] = 0.0
        tp[:, 0] /= tp[:, 0].sum(-1, keepdim=True)
    elif kind == "onehot_draft":  # a greedy draft (what _draft_probs builds) under a sampled target
        drafts = torch.multinomial(tp[:, : slots - 1].reshape(-1, vocab), 1,
                                   generator=g).view(bs, slots - 1)
        candidates[:, 1:] = drafts
        dp = torch.zeros_like(dp)
        dp[rows, steps, drafts] = 1.0
    elif kind == "bad_q":  # draft rows that are not probabilities at the draft token
        tp[:, : slots - 1] = dp
        dp[rows[:2, 0], 3, drafts[:2, 3]] = 0.0
        dp[rows[2:4, 0], 5, drafts[2:4, 5]] = float("nan")
    # Flat predicts positions in any order, as a retrive_index may hold them.
    retrive_index = torch.randperm(bs * slots, generator=g).view(bs, slots)
    return {
        "candidates": candidates,
        "retrive_index": retrive_index,
        "uniform_samples": torch.rand(bs, slots - 1, generator=g),
        "uniform_samples_for_final_sampling": torch.rand(bs, generator=g),
        "target_probs": tp.contiguous(),
        "draft_probs": dp.contiguous(),
    }


CASES = [(kind, seed, {}) for seed, kind in enumerate(KINDS)]
CASES += [("near", 10, {"vocab": 5000, "bs": 3}),  # CDF over two 4096-token tiles
          ("random", 11, {"slots": 2, "bs": 4}),  # one draft
          ("near", 12, {"slots": 17, "bs": 8, "vocab": 64})]


def _run(fn, inputs: dict, bs: int, slots: int, block_verification: bool) -> dict:
    out = {"predicts": torch.full((bs * slots,), SENTINEL, dtype=torch.int32),
           "accept_index": torch.full((bs, slots), SENTINEL, dtype=torch.int32),
           "accept_token_num": torch.full((bs,), SENTINEL, dtype=torch.int32)}
    fn(predicts=out["predicts"], accept_index=out["accept_index"],
       accept_token_num=out["accept_token_num"], retrive_next_token=None,
       retrive_next_sibling=None, threshold_single=1.0, threshold_acc=1.0, deterministic=True,
       block_verification=block_verification, **inputs)
    return out


INTERPRETED = r"""
import sys, torch
from sglang.kernels.ops.speculative.reject_sampling import chain_speculative_sampling_triton
cases = torch.load(sys.argv[1])
results = []
for inputs, block_verification in cases:
    bs, slots = inputs["candidates"].shape
    results.append(_run(chain_speculative_sampling_triton, inputs, bs, slots, block_verification))
torch.save(results, sys.argv[2])
"""


@pytest.fixture(scope="module")
def kernel_results(tmp_path_factory):
    """Every (case, mode) through the Triton kernel under the interpreter."""
    work = tmp_path_factory.mktemp("reject-sampling")
    cases = [(_case(kind, seed, **kw), bv) for kind, seed, kw in CASES for bv in (False, True)]
    torch.save(cases, work / "cases.pt")
    import inspect
    script = ("SENTINEL = %d\n" % SENTINEL) + inspect.getsource(_run) + INTERPRETED
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    result = subprocess.run([sys.executable, "-c", script, str(work / "cases.pt"),
                             str(work / "results.pt")], capture_output=True, text=True,
                            timeout=900, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    results = torch.load(work / "results.pt")
    return {(kind, seed, bv): (inputs, res)
            for (kind, seed, _), (inputs, bv), res in
            zip([c for c in CASES for _ in (0, 1)], cases, results)}


@pytest.mark.parametrize("block_verification", [False, True], ids=["classic", "block"])
@pytest.mark.parametrize("kind,seed,kw", CASES, ids=[f"{k}-{s}" for k, s, _ in CASES])
def test_torch_matches_the_interpreted_triton_kernel(kernel_results, kind, seed, kw,
                                                     block_verification):
    inputs, want = kernel_results[(kind, seed, block_verification)]
    bs, slots = inputs["candidates"].shape
    got = _run(chain_speculative_sampling, inputs, bs, slots, block_verification)
    for name in OUTPUTS:
        assert torch.equal(got[name], want[name]), (name, got[name], want[name])
    accepted = want["accept_token_num"]
    if kind == "full":
        assert (accepted == slots - 1).all()
    elif kind == "reject_first" and not block_verification:
        assert (accepted == 0).all()
    elif kind == "bad_q" and not block_verification:
        assert (accepted[:2] <= 3).all() and (accepted[2:4] <= 5).all()


def test_the_cases_cover_every_outcome(kernel_results):
    """Full acceptance, rejection at the first draft and every length in between, per mode."""
    for bv in (False, True):
        seen = set()
        for (kind, seed, mode), (inputs, res) in kernel_results.items():
            if mode == bv and inputs["candidates"].shape[1] == 10:
                seen.update(res["accept_token_num"].tolist())
        assert seen >= {0, 9} and len(seen) >= 6, (bv, sorted(seen))


def test_final_token_follows_the_residual_distribution():
    """An independent check of the correction draw: with the first draft always rejected, the
    emitted token is distributed as max(p - q, 0), normalised (inverse CDF of the final coin)."""
    vocab, n = 5, 4000
    p = torch.tensor([0.1, 0.4, 0.2, 0.3, 0.0])
    q = torch.tensor([0.3, 0.1, 0.1, 0.2, 0.3])  # draft token 4: p = 0, always rejected
    inputs = {"candidates": torch.tensor([[0, 4]]).repeat(n, 1),
              "retrive_index": torch.arange(2 * n).view(n, 2),
              "uniform_samples": torch.rand(n, 1, generator=torch.Generator().manual_seed(0)),
              "uniform_samples_for_final_sampling": (torch.arange(n) + 0.5) / n,
              "target_probs": torch.stack((p, p)).expand(n, 2, vocab).contiguous(),
              "draft_probs": q.expand(n, 1, vocab).contiguous()}
    out = _run(chain_speculative_sampling, inputs, n, 2, False)
    assert (out["accept_token_num"] == 0).all()
    tokens = out["predicts"].view(n, 2)[:, 0]
    counts = torch.bincount(tokens.long(), minlength=vocab).float() / n
    residual = (p - q).clamp_min(0)
    torch.testing.assert_close(counts, residual / residual.sum(), atol=1e-3, rtol=0)


BINDING_PROBE = r"""
import json
from sglang_dspark import plugin
plugin.register()
from sglang.kernels.ops.speculative import reject_sampling
from sglang.kernels.ops.speculative.dspark import dspark_accept
from sglang.srt.speculative import eagle_utils
triton_fn = reject_sampling.chain_speculative_sampling_triton
print("RESULT " + json.dumps({
    "dspark_accept": dspark_accept.chain_speculative_sampling_triton.__module__,
    "others_untouched": triton_fn.__module__ == reject_sampling.__name__
                        and eagle_utils.chain_speculative_sampling_triton is triton_fn,
}))
"""


@pytest.mark.parametrize("cpu_engine", [True, False], ids=["cpu", "not-cpu"])
def test_only_dspark_accept_is_rebound_and_only_on_cpu(cpu_engine):
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    if cpu_engine:
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    result = subprocess.run([sys.executable, "-c", BINDING_PROBE], capture_output=True,
                            text=True, timeout=300, cwd=ROOT, env=env)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    probe = json.loads(lines[0][len("RESULT "):])
    assert probe["others_untouched"]
    assert probe["dspark_accept"] == ("sglang_dspark.reject_sampling" if cpu_engine
                                      else "sglang.kernels.ops.speculative.reject_sampling")
