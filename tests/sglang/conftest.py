"""The one server the slow sglang_dspark tests share: DSPARK on the LFM2-VL fixture target
(whose language model is the LFM2 target) with the LFM2 DSpark drafter, exactly as the
conformance suite starts it, plus the context probe loaded through SGLang's plugin entry
points (``dspark_context_probe.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dspark_context_probe import LOG_ENV
from sglang_servers import dspark_server


@pytest.fixture(scope="session")
def vl_server(tmp_path_factory):
    """(engine process, path of the probe's JSON lines)."""
    root = tmp_path_factory.mktemp("context-probe")
    dist = root / "dspark_context_probe-0.dist-info"  # what pip would install for the probe
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dspark-context-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(
        "[sglang.srt.plugins]\ndspark_context_probe = dspark_context_probe:register\n")
    log = root / "context.jsonl"
    pythonpath = [str(root), str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    server = dspark_server("sglang-tests-lfm2_vl-DSPARK", "lfm2_vl",
                           ["--decode-log-interval", "1"],  # /server_info folds counters per step
                           {"PYTHONPATH": os.pathsep.join(p for p in pythonpath if p),
                            LOG_ENV: str(log)})
    with server:
        yield server, log


@pytest.fixture(scope="session")
def qwen3_server():
    """DSPARK on the Qwen3 fixture target with its DSpark drafter, as the conformance suite
    starts it (sampled requests: test_surfaces.py)."""
    with dspark_server("sglang-tests-qwen3-DSPARK", "qwen3") as server:
        yield server
