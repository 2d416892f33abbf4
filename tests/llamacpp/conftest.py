"""Fixtures for the llama.cpp tests: the patched build, the GGUF fixtures, shared servers.

The models are the project's trained fixtures (build/fixtures/<target>/<role>, converted to
build/fixtures/gguf/<target>-<role>.gguf by llamacpp_patches/convert_fixtures.py, which this
session runs first; it is cached). On in-domain prompts (held-out corpus windows) they must
reach an acceptance length of 3. Setting LLAMACPP_FIXTURES=<dir> runs the same tests on
untrained stand-ins of the same layout: every comparison still demands drafts, but the
acceptance floors are skipped (reported as skipped).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_server import ROOT

FIXTURES = Path(os.environ.get("LLAMACPP_FIXTURES", ROOT / "build/fixtures"))
IN_DOMAIN_FLOOR = 3.0

CORPUS = ROOT / "fixtures/corpus/stdlib.jsonl.xz"  # the fixtures' training corpus, committed
N_PROMPTS = 8


@pytest.fixture(scope="session")
def gguf_dir() -> Path:
    """The fixtures as GGUF, converted with the patched tree's converter (cached by digest)."""
    run = subprocess.run([sys.executable, str(ROOT / "llamacpp_patches/convert_fixtures.py"),
                          "--fixtures", str(FIXTURES)], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.fail(f"converting {FIXTURES} failed (build them with ci/setup.sh, or set "
                    f"LLAMACPP_FIXTURES):\n{run.stdout}\n{run.stderr[-3000:]}", pytrace=False)
    return FIXTURES / "gguf"


@pytest.fixture(scope="session")
def gguf(gguf_dir):
    """gguf("qwen3", "lilicorr") -> the converted file of build/fixtures/qwen3/lilicorr."""
    def path(target: str, role: str) -> Path:
        file = gguf_dir / f"{target}-{role}.gguf"
        if not file.is_file():
            pytest.fail(f"missing {file}: no checkpoint at {FIXTURES / target / role}", pytrace=False)
        return file
    return path


@pytest.fixture(scope="session")
def hf_fixture():
    def path(target: str, role: str) -> Path:
        folder = FIXTURES / target / role
        if not (folder / "config.json").is_file():
            pytest.fail(f"missing fixture {folder}: build the fixtures or set LLAMACPP_FIXTURES",
                        pytrace=False)
        return folder
    return path


@pytest.fixture(scope="session")
def trained_floor() -> float | None:
    """The in-domain acceptance-length floor of the trained fixtures, None for stand-ins."""
    return None if "LLAMACPP_FIXTURES" in os.environ else IN_DOMAIN_FLOOR


@pytest.fixture(scope="session")
def prompts(hf_fixture) -> list[list[int]]:
    """In-domain prompts: windows (16-96 tokens) of the corpus files held out of training, drawn
    the way the fixture builder draws its evaluation prompts, as token ids."""
    import random

    from tokenizers import Tokenizer

    from blockdraft.fixtures.corpus import read_corpus
    from blockdraft.fixtures.targets import sample_prompts
    from blockdraft.fixtures.text import TextSampler

    tokenizer = Tokenizer.from_file(str(hf_fixture("qwen3", "target") / "tokenizer.json"))
    held_out = [doc for doc in read_corpus(CORPUS) if doc.held_out]
    sampler = TextSampler(tokenizer, held_out, chat_fraction=0.2, rng=random.Random(2026))
    return sample_prompts(sampler, N_PROMPTS, (16, 96), random.Random(2026))
