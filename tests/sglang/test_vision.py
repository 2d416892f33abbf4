"""DSPARK with an LFM2-VL target and images in the prompt: lossless, and accepting tokens.

The image's patch embeddings enter the target's hidden states, which the drafter taps; a
drafter trained on image prompts can only reach its acceptance length if those positions reach
its context.
"""

from __future__ import annotations

import base64
import io
import statistics

import numpy as np
import pytest
from PIL import Image

from sglang_servers import AL_FLOOR, Server, dspark_args, fixture_dir, generate

pytestmark = pytest.mark.slow

TARGET = "lfm2_vl"
NEW_TOKENS = 48
PROMPTS = ["<image>def main(argv):\n    ", "<image>import os\nimport sys\n\n",
           "<image>class Config:\n    def __init__(self"]


def _image(seed: int) -> str:
    """A small deterministic RGB image as a data URL."""
    pixels = (np.random.default_rng(seed).random((64, 64, 3)) * 255).astype("uint8")
    pixels[16:48, 16:48] = [255, 0, 0]
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


IMAGES = [_image(seed) for seed in range(2)]
CHAT = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGES[0]}},
                                     {"type": "text", "text": "Describe the image."}]}]


def _ask(server: Server) -> dict:
    return {
        "generate": [generate(server, p, NEW_TOKENS, image_data=img)[0]
                     for img in IMAGES for p in PROMPTS],
        "chat": server.post("/v1/chat/completions", {
            "model": "m", "messages": CHAT, "max_tokens": NEW_TOKENS, "temperature": 0,
            "ignore_eos": True})["choices"][0]["message"]["content"],
    }


@pytest.fixture(scope="module")
def reference(server_logs) -> dict:
    server = Server(["--model-path", str(fixture_dir(TARGET, "target"))],
                    server_logs / "lfm2_vl-reference.log").wait_ready()
    try:
        return _ask(server)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def answers(reference, server_logs) -> dict:
    server = Server(dspark_args(TARGET), server_logs / "lfm2_vl-dspark.log").wait_ready()
    try:
        return _ask(server)
    finally:
        server.stop()


def test_image_prompts_equal_target(reference, answers):
    want = [r["output_ids"] for r in reference["generate"]]
    assert [r["output_ids"] for r in answers["generate"]] == want
    assert answers["chat"] == reference["chat"]
    # The image changes what the target says, so the image really is in the prompt.
    assert want[0] != want[len(PROMPTS)]


def test_image_prompts_accept_drafts(answers):
    metas = [r["meta_info"] for r in answers["generate"]]
    assert all(m["image_tokens"] > 0 and m["spec_verify_ct"] > 0 for m in metas)
    mean_al = statistics.mean(m["spec_accept_length"] for m in metas)
    print(f"lfm2_vl: acceptance length per prompt "
          f"{[round(m['spec_accept_length'], 2) for m in metas]}, mean {mean_al:.2f}")
    assert mean_al >= AL_FLOOR
