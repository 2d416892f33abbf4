#!/usr/bin/env bash
# README's test command: set everything up, then run every test suite in its own environment.
# Slow tests (engines, training) run too. Reports land in reports/.
set -uo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh || exit 1
mkdir -p reports
rm -f reports/reliability/rows.jsonl  # the suites append this run's rows
status=0
suite() {
  local venv=$1; shift
  echo "=== pytest $* (.venvs/$venv)"
  ".venvs/$venv/bin/python" -m pytest -rs --durations=15 "$@"
  local rc=$?
  # 5 = no tests collected: a suite that has no tests yet is not a failure.
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then status=1; fi
}
suite core tests/core
suite vllm tests/vllm
suite sglang tests/sglang
suite core tests/llamacpp
suite core tests/conformance
.venvs/core/bin/python ci/reliability.py || status=1
exit $status
