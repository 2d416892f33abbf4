"""DSPARK with an LFM2-VL target: images reach the drafter, and image prompts accept drafts.

DSPARK's drafter sees the prompt only through its context KV, which SGLang projects from the
target's tap hidden states at every prompt position. The context probe records the rows
injected there; the same text with two different images must give, at every position, image
tokens included, exactly the tap states of the Hugging Face target given that image, and so
different rows at the image positions. (Lossless outputs with images: the conformance suite's
image_input scenario.)
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from blockdraft.specs import read_drafter_spec
from blockdraft.target import HFTarget
from sglang_servers import fixture_dir
from tests.conformance.drivers.base import http_json

pytestmark = pytest.mark.slow

TEXT = "# a picture\n<image>def describe(image):\n"
NEW_TOKENS = 48
# The text drafter meets image positions it was never trained on, yet must still accept:
# below the text floor of the conformance suite (3.0), above its generic one (1.5).
AL_FLOOR = 2.0
TOLERANCE = 1e-3


def _image(seed: int) -> Image.Image:
    pixels = (np.random.default_rng(seed).random((64, 64, 3)) * 255).astype("uint8")
    pixels[16:48, 16:48] = [255 * (seed % 2), 0, 255]
    return Image.fromarray(pixels)


def _data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


IMAGES = [_image(seed) for seed in range(2)]


@pytest.fixture(scope="module")
def answers(vl_server) -> list[dict]:
    """Per image: SGLang's answer and the drafter context the probe saw for it."""
    server, log = vl_server
    results = [http_json(server.url + "/generate", {
        "text": TEXT, "image_data": _data_url(image),
        "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}})
        for image in IMAGES]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for result in results:
        mine = [r for r in records if r["rid"] == result["meta_info"]["id"]]
        result["context"] = {r["start"] + i: row for r in mine for i, row in enumerate(r["rows"])}
        result["records"] = mine
    return results


@pytest.fixture(scope="module")
def reference() -> list[dict]:
    """Per image: the HF target's prompt ids and tap states (the drafter's tap layers)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = fixture_dir("lfm2_vl", "target")
    taps = read_drafter_spec(fixture_dir("lfm2", "dspark")).backbone.target_layer_ids
    processor = AutoProcessor.from_pretrained(path)
    target = HFTarget(AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32), taps)
    out = []
    for image in IMAGES:
        inputs = processor(text=[TEXT], images=[[image]], return_tensors="pt")
        ids = inputs.pop("input_ids")
        inputs.pop("attention_mask", None)
        _, states = target(ids, **inputs)
        out.append({"ids": ids[0].tolist(), "taps": states[0]})
    return out


def test_images_reach_the_target(answers, reference):
    config = json.loads((fixture_dir("lfm2_vl", "target") / "config.json").read_text())
    for answer, ref in zip(answers, reference):
        meta = answer["meta_info"]
        assert meta["prompt_tokens"] == len(ref["ids"])  # SGLang expanded the image as HF does
        assert meta["image_tokens"] == ref["ids"].count(config["image_token_id"])
    assert answers[0]["output_ids"] != answers[1]["output_ids"]  # the image changes the answer


def test_image_prompts_accept_drafts(answers):
    lengths = []
    for answer in answers:
        meta = answer["meta_info"]
        assert meta["spec_verify_ct"] > 0, meta
        lengths.append(1 + meta["spec_num_correct_drafts"] / meta["spec_verify_ct"])
    print(f"lfm2_vl image prompts: acceptance length {[round(x, 2) for x in lengths]}")
    assert min(lengths) >= AL_FLOOR


def test_every_uncached_prompt_position_is_injected_into_the_drafter(answers):
    for answer in answers:
        meta = answer["meta_info"]
        assert answer["records"], "the probe saw no prefill of this request"
        assert all(r["all_rows"] and r["batch_rows"] == r["batch_slots"] for r in answer["records"])
        assert sorted(answer["context"]) == list(range(meta["cached_tokens"], meta["prompt_tokens"]))
        images = [p for r in answer["records"][:1] for start, end in r["images"]
                  for p in range(start, end + 1)]
        assert images and set(images) <= set(answer["context"])


def test_drafter_context_is_the_targets_hidden_state_given_the_image(answers, reference):
    contexts = []
    for answer, ref in zip(answers, reference):
        positions = sorted(answer["context"])
        rows = torch.tensor([answer["context"][p] for p in positions])
        torch.testing.assert_close(rows, ref["taps"][positions], atol=TOLERANCE, rtol=TOLERANCE)
        contexts.append(answer["context"])
    images = [p for start, end in answers[0]["records"][0]["images"] for p in range(start, end + 1)]
    differences = [float((torch.tensor(contexts[0][p]) - torch.tensor(contexts[1][p])).abs().max())
                   for p in images]
    assert min(differences) > 100 * TOLERANCE, differences  # the image, not noise, sets them
