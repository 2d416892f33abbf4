#!/usr/bin/env bash
# .venvs/core: the engine-free core (blockdraft), the fixture builder and the test runner.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
venv="$VENVS/core"
digest=$(inputs_digest "$ROOT/ci/setup/core.sh" "$ROOT/ci/requirements/core.txt" "$ROOT/pyproject.toml")
if stamp_current core "$digest" && [ -x "$venv/bin/python" ]; then say "core environment ready"; exit 0; fi
say "creating the core environment in $venv"
make_venv "$venv"
"$venv/bin/pip" install -q -r "$ROOT/ci/requirements/core.txt"
"$venv/bin/pip" install -q --no-deps --config-settings editable_mode=compat -e "$ROOT"
stamp_write core "$digest"
say "core environment ready"
