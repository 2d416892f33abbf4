#!/usr/bin/env bash
# .venvs/sglang: sglang 0.5.23 without its CUDA-only requirements + blockdraft + sglang_dspark.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
venv="$VENVS/sglang"
digest=$(inputs_digest "$ROOT/ci/setup/sglang.sh" "$ROOT/ci/requirements/sglang.txt" "$ROOT/pyproject.toml" \
  "$ROOT/sglang_dspark/pyproject.toml")
if stamp_current sglang "$digest" && [ -x "$venv/bin/python" ]; then say "SGLang environment ready"; exit 0; fi
say "creating the SGLang environment in $venv (about 3 minutes)"
make_venv "$venv"
# sglang's Requires-Dist pins many CUDA-only packages (sglang-kernel, flashinfer, ...): its
# CPU-usable requirements are installed from the pinned list, then sglang itself without deps.
"$venv/bin/pip" install -q -r "$ROOT/ci/requirements/sglang.txt"
"$venv/bin/pip" install -q --no-deps sglang==0.5.23
# compat mode puts the project folders on sys.path, so the plugin package wins over the
# same-named top-level folder when a process starts in the repository root.
"$venv/bin/pip" install -q --no-deps --config-settings editable_mode=compat -e "$ROOT" -e "$ROOT/sglang_dspark"
# torchvision's C++ ops must load beside torch (a mismatched build fails with
# "operator torchvision::nms does not exist"); sglang's engine imports torchvision.
"$venv/bin/python" - <<'PY'
import torch, torchvision, sglang
from torchvision.ops import nms
assert nms(torch.tensor([[0., 0, 1, 1], [0, 0, 1, 1]]), torch.tensor([1., .5]), .5).tolist() == [0]
PY
stamp_write sglang "$digest"
say "SGLang environment ready"
