"""Shared fixtures of the core tests: one tiny fixture build (other shapes than the committed
fixtures), made once per session with the builder's quick budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from blockdraft.fixtures.__main__ import main as fixtures_main

REPO = Path(__file__).resolve().parents[2]
TINY_SHAPE = ["--hidden-size", "64", "--num-layers", "3", "--num-heads", "2", "--vocab-size", "512",
              "--block-size", "6", "--topk", "2"]


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory) -> Path:
    """A quick build of both target kinds at a non-default shape: hidden 64, 3 layers,
    vocab 512, block 6 (DSpark 7), top-2 candidates. Returns the materialised folder."""
    root = tmp_path_factory.mktemp("tiny-fixtures")
    (root / "corpus").mkdir()
    shutil.copy(REPO / "fixtures/corpus/stdlib.jsonl.xz", root / "corpus")
    assert fixtures_main(["build", "--root", str(root), "--quick", *TINY_SHAPE]) == 0
    out = root / "materialized"
    assert fixtures_main(["materialize", "--root", str(root), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_shape() -> list[str]:
    """The builder options of tiny_build's shape (to build more of it)."""
    return TINY_SHAPE
