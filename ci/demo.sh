#!/usr/bin/env bash
# README's first command: set everything up, then run the main job: our users' four documented
# commands on the built-in fixtures, each beside the same server without speculation.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh
exec .venvs/core/bin/python ci/demo.py
