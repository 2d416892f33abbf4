"""The series applies to the pin with git am and to the sdist's vendored tree with patch -p1,
both giving the tree ci/setup/llamacpp.sh built, and regenerating it is byte-stable."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conformance.drivers.base import REPO as ROOT

PATCHES = ROOT / "llamacpp_patches"
TREE = ROOT / "build/llama.cpp"
PIN = dict(line.split("=", 1) for line in (PATCHES / "PIN").read_text().splitlines()
           if "=" in line and not line.startswith("#"))
SERIES = sorted(PATCHES.glob("[0-9][0-9][0-9][0-9]-*.patch"))


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def built_tree() -> str:
    """The tree (git tree id) that ci/setup/llamacpp.sh checked out and built."""
    if not (TREE / ".git").exists():
        pytest.fail("build/llama.cpp is missing: run ci/setup/llamacpp.sh", pytrace=False)
    return git("rev-parse", "HEAD^{tree}", cwd=TREE)


def test_series_is_not_empty():
    assert len(SERIES) >= 5, [p.name for p in SERIES]


def test_git_am_on_the_pin(tmp_path, built_tree):
    worktree = tmp_path / "pin"
    git("worktree", "add", "-q", "--detach", str(worktree), PIN["commit"], cwd=TREE)
    try:
        git("-c", "user.name=test", "-c", "user.email=test@localhost", "am", "-q", *map(str, SERIES), cwd=worktree)
        assert git("rev-parse", "HEAD^{tree}", cwd=worktree) == built_tree
        assert git("rev-list", "--count", f"{PIN['commit']}..HEAD", cwd=worktree) == str(len(SERIES))
    finally:
        git("worktree", "remove", "--force", str(worktree), cwd=TREE)


def test_patch_p1_on_the_sdist(tmp_path, built_tree):
    tarballs = sorted((ROOT / "build/downloads" / PIN["sdist"]).glob("*.tar.gz"))
    if not tarballs:
        pytest.fail(f"no {PIN['sdist']} sdist in build/downloads: run ci/setup/llamacpp.sh", pytrace=False)
    with tarfile.open(tarballs[0]) as tar:
        tar.extractall(tmp_path, filter="tar")
    vendored = next(tmp_path.glob("*/vendor/llama.cpp"))
    subprocess.run([str(PATCHES / "apply.sh"), "--patch", str(vendored)], check=True, capture_output=True)
    # the vendored tree is a submodule checkout at the pin: its own index gives the patched tree id
    git("add", "-u", cwd=vendored)
    assert git("write-tree", cwd=vendored) == built_tree


def test_regenerate_is_byte_stable(tmp_path):
    for name in ("regenerate.sh", "PIN"):
        shutil.copy(PATCHES / name, tmp_path / name)
    subprocess.run([str(tmp_path / "regenerate.sh"), str(TREE)], check=True, capture_output=True)
    regenerated = sorted(tmp_path.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    assert [p.name for p in regenerated] == [p.name for p in SERIES]
    for new, committed in zip(regenerated, SERIES):
        assert new.read_bytes() == committed.read_bytes(), f"{committed.name} differs when regenerated"
