"""Loading the plugin: once per process, nothing on CPU unless SGLang runs on CPU, version gate.

Each case runs in a fresh interpreter: SGLang's hook registry is process-global.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_servers import ROOT

PROBE = r"""
import json, sys
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.runtime_context import get_platform
from sglang_dspark import plugin
plugin.register()
plugin.register()
stand_in = [p for p in sys.path if p.endswith("sgl_kernel_stand_in")]
print("RESULT " + json.dumps({
    "hooks": {t: len(h) for t, h in HookRegistry._hooks.items()},
    "stand_in": len(stand_in),
    "has_amx": get_platform().has_amx,
}))
"""


def _probe(env: dict, code: str = PROBE) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("SGLANG_USE_CPU_ENGINE", "SGLANG_DSPARK_ALLOW_ANY_VERSION")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, cwd=ROOT, env={**base, **env})
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, result.stderr[-3000:]
    return {**json.loads(lines[0][len("RESULT "):]), "log": result.stderr}


def test_off_cpu_only_the_dspark_argument_hook_is_registered():
    result = _probe({})
    assert result["hooks"] == {"sglang.srt.arg_groups.speculative_hook._handle_dspark": 1}
    assert result["stand_in"] == 0


def test_on_cpu_each_hook_is_registered_once():
    from sglang_dspark.patches import HOOKS

    result = _probe({"SGLANG_USE_CPU_ENGINE": "1"})
    assert result["hooks"] == {patch.target: 1 for patch in HOOKS}
    assert result["stand_in"] == 1
    # with the plain-torch ops SGLang's AMX path (the CPU backend that verifies drafts) runs on
    # any CPU, AMX or not (this machine's CPU may have none)
    assert result["has_amx"] is True


def test_every_patch_target_exists_in_this_sglang():
    code = r"""
import json, pkgutil
from sglang_dspark import plugin
from sglang_dspark.patches import HOOKS
plugin.register()  # as in a server: on CPU the stand-in sgl_kernel that SGLang's modules import
missing = []
for patch in HOOKS:
    owner, _, attr = patch.target.rpartition(".")
    if not hasattr(pkgutil.resolve_name(owner), attr):
        missing.append(patch.target)
print("RESULT " + json.dumps({"missing": missing}))
"""
    assert _probe({"SGLANG_USE_CPU_ENGINE": "1"}, code)["missing"] == []


VERSION_PROBE = r"""
import json
import sglang.version
sglang.version.__version__ = "0.5.24"
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang_dspark import plugin
plugin.register()
print("RESULT " + json.dumps({"hooks": len(HookRegistry._hooks)}))
"""


def test_other_sglang_version_is_refused_with_one_line():
    result = _probe({}, VERSION_PROBE)
    assert result["hooks"] == 0
    refusals = [ln for ln in result["log"].splitlines() if "sglang_dspark supports sglang" in ln]
    assert len(refusals) == 1 and "found 0.5.24" in refusals[0]
    assert "SGLANG_DSPARK_ALLOW_ANY_VERSION=1" in refusals[0]


def test_version_override_loads_the_plugin():
    result = _probe({"SGLANG_DSPARK_ALLOW_ANY_VERSION": "1"}, VERSION_PROBE)
    assert result["hooks"] == 1
