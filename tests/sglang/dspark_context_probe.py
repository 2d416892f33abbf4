"""A test-only SGLang plugin that records what DSPARK writes into the drafter's context.

DSPARK's drafter has no input embeddings for the prompt: its context KV at every prompt
position is projected from the target's hidden states there (``TargetHiddenKvInjector``,
called from ``DSparkWorkerV2._forward_prefill``). This probe records, for each prefill, which
positions of each request were injected, where its images sit, and the injected rows, as JSON
lines in ``$DSPARK_CONTEXT_PROBE_LOG``. ``tests/sglang/conftest.py`` loads it into
one server through SGLang's own plugin entry points (a generated ``.dist-info`` on PYTHONPATH).
"""

from __future__ import annotations

import json
import os

WORKER = "sglang.srt.speculative.dspark_components.dspark_worker_v2.DSparkWorkerV2._forward_prefill"
INJECTOR = ("sglang.srt.speculative.dspark_components.dspark_kv_inject."
            "TargetHiddenKvInjector.inject_prefill")
LOG_ENV = "DSPARK_CONTEXT_PROBE_LOG"

_requests: list[dict] = []  # the prefill being run: one entry per request, in batch order


def _note_prefill(original, worker, batch, *args, **kwargs):
    _requests[:] = []
    for i, req in enumerate(batch.reqs):
        items = req.multimodal_inputs.mm_items if req.multimodal_inputs is not None else []
        _requests.append({
            "rid": req.rid, "start": int(batch.prefix_lens[i]), "length": int(batch.extend_lens[i]),
            # inclusive [start, end] spans of image tokens in the whole prompt
            "images": [list(span) for item in items for span in (item.offsets or [])]})
    return original(worker, batch, *args, **kwargs)


def _note_injection(original, injector, placement, *, target_hidden, token_indices, **kwargs):
    rows = target_hidden.detach().float()
    offset = 0
    with open(os.environ[LOG_ENV], "a") as log:
        for request in _requests:
            block = rows[offset:offset + request["length"]]
            offset += request["length"]
            # the whole prefill: hidden rows, and draft KV slots they are written to
            log.write(json.dumps({**request, "all_rows": token_indices is None,
                                  "batch_rows": int(rows.shape[0]),
                                  "batch_slots": int(placement.cache_loc.numel()),
                                  "rows": block.tolist()}) + "\n")
    return original(injector, placement, target_hidden=target_hidden,
                    token_indices=token_indices, **kwargs)


def register() -> None:
    if not os.environ.get(LOG_ENV):
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(WORKER, _note_prefill, HookType.AROUND)
    HookRegistry.register(INJECTOR, _note_injection, HookType.AROUND)
