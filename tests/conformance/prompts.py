"""Prompt sets of the conformance suite, made deterministically from the held-out corpus with
the fixtures' tokenizer, as token ids (so every engine sees exactly the same prompt)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from blockdraft.fixtures.corpus import read_corpus
from blockdraft.fixtures.text import TextSampler

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fixtures/corpus/stdlib.jsonl.xz"
TOKENIZER = REPO / "build/fixtures/qwen3/target/tokenizer.json"
IMAGE_DIR = REPO / "build/conformance/images"
# Greedy on the Qwen3 fixture, the float32 reference's top two logits at generated token 71 are
# " return" 10.7379 and " if" 10.7308 (gap 0.0072): SGLang's plain CPU decode chose " if"
NEAR_TIE_PROMPT = ("import os\nimport sys\n\n\ndef find_files(root, suffix):\n    result = []\n"
                   "    for dirpath, dirnames, filenames in os.walk(root):\n")

# (variable, rows) of the "json" prompts: few-shot context that asks for compact objects
JSON_PROMPTS = tuple(
    (variable, "".join(f'    json.loads(\'{{"module": "{m}", "line": {n}}}\'),\n' for m, n in rows))
    for variable, rows in (("IMPORTS", (("os", 3), ("sys", 4))), ("SEEN", (("re", 12),)),
                       ("MODULES", (("json", 1), ("typing", 7), ("os", 20))), ("FOUND", (("sys", 9),))))


@dataclass(frozen=True)
class Request:
    prompt_ids: tuple[int, ...] = ()
    # vision requests: text with one image placeholder the driver renders its engine's way
    prompt_text: str = ""
    image: Path | None = None


def _sampler(chat_fraction: float, seed: int) -> TextSampler:
    documents = [d for d in read_corpus(CORPUS) if d.held_out]
    return TextSampler(tokenizer(), documents, chat_fraction, random.Random(seed))


@lru_cache(maxsize=None)
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER))


def text_ids(text: str) -> list[int]:
    """A prompt's or a streamed answer's text as the fixtures' token ids."""
    return tokenizer().encode(text, add_special_tokens=False).ids


def _images() -> list[Path]:
    """Two deterministic 64x64 images: a gradient with a square, and stripes."""
    from PIL import Image, ImageDraw

    IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(2):
        image = Image.new("RGB", (64, 64))
        draw = ImageDraw.Draw(image)
        for x in range(64):
            draw.line([(x, 0), (x, 63)], fill=(4 * x, 255 - 4 * x, 128 * i))
        if i == 0:
            draw.rectangle([16, 16, 47, 47], fill=(250, 250, 250))
        else:
            for y in range(0, 64, 8):
                draw.rectangle([0, y, 63, y + 3], fill=(0, 0, 0))
        path = IMAGE_DIR / f"image-{i}.png"
        image.save(path)
        paths.append(path)
    return paths


@lru_cache(maxsize=None)
def prompt_set(name: str) -> tuple[Request, ...]:
    if name == "in_domain":
        s = _sampler(0.0, 11)
        return tuple(Request(tuple(s.prompt(n))) for n in (24, 40, 56, 72))
    if name == "in_domain24":  # enough prompts for an acceptance length within about +-0.2
        s = _sampler(0.0, 17)
        return tuple(Request(tuple(s.prompt(random.Random(17 + i).choice((24, 40, 56, 72)))))
                     for i in range(24))
    if name == "held_out":  # the prompts fixtures/REPORT.md was measured on
        from blockdraft.fixtures.evaluate import plan_prompts

        plan = json.loads((REPO / "fixtures/manifest.json").read_text())["plan"]
        return tuple(Request(tuple(p)) for p in plan_prompts(plan, CORPUS, tokenizer()))
    if name == "mixed8":
        s = _sampler(0.2, 12)
        return tuple(Request(tuple(s.prompt(n))) for n in (16, 200, 40, 120, 24, 88, 64, 152))
    if name == "burst64":
        s = _sampler(0.2, 16)
        return tuple(Request(tuple(s.prompt(n))) for n in (16, 200, 40, 120, 24, 88, 64, 152) * 8)
    if name == "sustained200":
        s = _sampler(0.2, 18)
        return tuple(Request(tuple(s.prompt(random.Random(18 + i).choice((16, 32, 64, 96)))))
                     for i in range(200))
    if name == "shared_prefix":
        s = _sampler(0.0, 13)
        prefix = s.prompt(300)  # several KV blocks in every engine (vLLM's CPU blocks: 128)
        suffixes = [tuple(s.prompt(16)) for _ in range(4)]
        once = [Request(tuple(prefix) + suffix) for suffix in suffixes]
        return tuple(once + once)  # the second round reads the cached prefix
    if name == "long":
        s = _sampler(0.0, 14)
        return tuple(Request(tuple(s.prompt(320))) for _ in range(2))
    if name == "chat":
        s = _sampler(1.0, 15)
        return tuple(Request(tuple(s.prompt(64))) for _ in range(4))
    if name == "json":  # Python code around compact JSON objects, as the schema's answers
        return tuple(Request(tuple(text_ids(f"import json\n\n{variable} = [\n{rows}]\n"
                                            f"{variable}.append(json.loads('")))
                     for variable, rows in JSON_PROMPTS)
    if name == "near_tie":  # issue 29: the Qwen3 target's logits tie at generated token 71
        return (Request(tuple(text_ids(NEAR_TIE_PROMPT))),)
    if name == "image":
        return tuple(Request(prompt_text=text, image=image)
                     for text, image in zip(("The image shows", "def describe(image):\n"), _images()))
    raise KeyError(f"unknown prompt set {name!r}")
