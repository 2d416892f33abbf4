#!/usr/bin/env bash
# README's test command: set everything up, then run every test suite in its own environment.
# Slow tests (engines, training) run too. Reports land in reports/.
set -uo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh || exit 1
mkdir -p reports build/logs
rm -f reports/reliability/rows.jsonl  # the suites append this run's rows
status=0
# suite NAME VENV PYTEST-ARGS...: one pytest session, its output in build/logs/test-NAME.log
suite() {
  local name=$1 venv=$2; shift 2
  { echo "=== pytest $* (.venvs/$venv)"; ".venvs/$venv/bin/python" -m pytest -rs --durations=15 "$@"; } \
    > "build/logs/test-$name.log" 2>&1
}
# finish NAME RC: print the suite's output; 5 = no tests collected, not a failure
finish() {
  cat "build/logs/test-$1.log"
  if [ "$2" -ne 0 ] && [ "$2" -ne 5 ]; then status=1; fi
}
# The engine suites spend most of their time in engine start-ups (imports, loading, polling
# for readiness) that leave a core idle, so they run beside the core suite, which keeps both
# cores busy measuring the fixtures: 16 minutes instead of 21 one after the other (2 cores).
names=(core vllm sglang llamacpp) pids=()
echo "=== tests/{core,vllm,sglang,llamacpp} side by side (progress: build/logs/test-<suite>.log)"
suite core core tests/core & pids+=($!)
suite vllm vllm tests/vllm & pids+=($!)
suite sglang sglang tests/sglang & pids+=($!)
suite llamacpp core tests/llamacpp & pids+=($!)
for i in "${!names[@]}"; do wait "${pids[$i]}"; finish "${names[$i]}" $?; done
# Conformance runs alone: its load and fault scenarios (bursts, preemption, disconnects) are
# meant to load the engine under test, not to share the cores with other suites.
suite conformance core tests/conformance; finish conformance $?
.venvs/core/bin/python ci/reliability.py || status=1
exit $status
