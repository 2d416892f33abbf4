#!/usr/bin/env bash
# build/fixtures: float32 Hugging Face checkpoints materialised from the committed store.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
out="$BUILD/fixtures"
digest=$(inputs_digest "$ROOT/ci/setup/fixtures.sh" "$ROOT/fixtures" "$ROOT/plugins/blockdraft/fixtures/store.py" \
  "$ROOT/plugins/blockdraft/fixtures/vision.py")
if stamp_current fixtures "$digest" && [ -d "$out" ]; then say "fixtures ready in $out"; exit 0; fi
say "materialising fixtures into $out"
rm -rf "$out"
(cd "$ROOT" && "$VENVS/core/bin/python" -m blockdraft.fixtures materialize --root fixtures --out "$out")
stamp_write fixtures "$digest"
say "fixtures ready in $out"
