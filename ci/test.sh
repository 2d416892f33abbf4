#!/usr/bin/env bash
# README's test command: set everything up, then run every test suite in its own environment.
# Slow tests (engines, training) run too. Reports land in reports/.
set -uo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh || exit 1
mkdir -p reports build/logs
rm -f reports/reliability/rows.jsonl  # the suites append this run's rows
status=0
# suite NAME VENV: pytest tests/NAME in .venvs/VENV, its output in build/logs/test-NAME.log
suite() {
  { echo "=== pytest tests/$1 (.venvs/$2)"; ".venvs/$2/bin/python" -m pytest -rs --durations=15 "tests/$1"; } \
    > "build/logs/test-$1.log" 2>&1
}
# finish NAME RC: print the suite's output; 5 = no tests collected, not a failure
finish() {
  cat "build/logs/test-$1.log"
  if [ "$2" -ne 0 ] && [ "$2" -ne 5 ]; then status=1; fi
}
# The engine suites spend most of their time in engine start-ups (imports, loading, polling
# for readiness) that leave a core idle, so they run beside the core suite, which keeps both
# cores busy measuring the fixtures.
side_by_side=(core:core vllm:vllm sglang:sglang llamacpp:core)  # NAME:VENV
echo "=== tests side by side: ${side_by_side[*]%%:*} (progress: build/logs/test-<suite>.log)"
pids=()
for entry in "${side_by_side[@]}"; do suite "${entry%%:*}" "${entry#*:}" & pids+=($!); done
for i in "${!side_by_side[@]}"; do wait "${pids[$i]}"; finish "${side_by_side[$i]%%:*}" $?; done
# Conformance runs alone: its load and fault scenarios (bursts, preemption, disconnects) are
# meant to load the engine under test, not to share the cores with other suites. And beside
# another engine each engine here is several times slower, not less busy (llama-server's threads
# spin at each barrier of a graph, SGLang's scheduler and vLLM's worker poll): two conformance
# sessions side by side took longer than one after the other.
suite conformance core; finish conformance $?
.venvs/core/bin/python ci/reliability.py || status=1
exit $status
