#!/usr/bin/env bash
# README's first command: set everything up, then run the main job on the built-in fixtures.
# Until the engine demo lands, the main job is the engine-free reference measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
echo "== reference loop (engine-free, plain torch) on the built-in fixtures"
.venvs/core/bin/python -m blockdraft.fixtures evaluate --fixtures build/fixtures
