#!/usr/bin/env bash
# build/fixtures/gguf: the fixtures converted with the patched tree's convert_hf_to_gguf.py
# (each file is redone only when its checkpoint, the tree or the script changed).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"
"$VENVS/core/bin/python" llamacpp_patches/convert_fixtures.py --fixtures "$BUILD/fixtures"
say "GGUF fixtures ready in $BUILD/fixtures/gguf"
