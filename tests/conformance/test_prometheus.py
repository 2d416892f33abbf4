"""Reading engines' Prometheus /metrics pages (no engine: a page of text)."""

from __future__ import annotations

from .drivers import base

PAGE = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 9.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="target",position="0"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 4.0
llamacpp:requests_processing 2
"""


def test_metrics_sum_over_labels_and_read_unlabelled_samples(monkeypatch):
    monkeypatch.setattr(base, "http_text", lambda url: PAGE)
    values = base.metrics("http://x")
    assert values["vllm:spec_decode_num_drafts_total"] == 12.0
    assert values["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 14.0
    assert values["llamacpp:requests_processing"] == 2.0


def test_metric_by_label(monkeypatch):
    monkeypatch.setattr(base, "http_text", lambda url: PAGE)
    assert base.metric_by_label("http://x", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                "position") == {"0": 10.0, "1": 4.0}
