#!/usr/bin/env bash
# README's test command: set everything up, then run every test suite in its own environment.
# Slow tests (engines, training) run too. Reports land in reports/.
set -uo pipefail
cd "$(dirname "$0")/.."
ci/setup.sh || exit 1
mkdir -p reports build/logs
rm -f reports/reliability/rows.jsonl  # the suites append this run's rows
status=0
# suite NAME VENV [PYTEST ARGS]: pytest (default: tests/NAME) in .venvs/VENV, its output in
# build/logs/test-NAME.log
suite() {
  local name=$1 venv=$2; shift 2
  [ $# -gt 0 ] || set -- "tests/$name"
  { echo "=== pytest $* (.venvs/$venv)"; ".venvs/$venv/bin/python" -m pytest -rs --durations=15 "$@"; } \
    > "build/logs/test-$name.log" 2>&1
}
# finish NAME RC: print the suite's output; 5 = no tests collected, not a failure
finish() {
  cat "build/logs/test-$1.log"
  if [ "$2" -ne 0 ] && [ "$2" -ne 5 ]; then status=1; fi
}
# side_by_side ENTRY...: run the suites (NAME:VENV[:PYTEST ARGS]) at once, print each in order
side_by_side() {
  echo "=== side by side: ${*%%:*} (progress: build/logs/test-<name>.log)"
  local entry name venv args pids=() names=() i
  for entry in "$@"; do
    IFS=: read -r name venv args <<< "$entry"
    # shellcheck disable=SC2086  # args: space-separated pytest arguments
    suite "$name" "$venv" $args & pids+=($!); names+=("$name")
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}"; finish "${names[$i]}" $?; done
}
# The engine suites spend most of their time in engine start-ups (imports, loading, polling
# for readiness) that leave a core idle, so they run beside the core suite, which keeps both
# cores busy measuring the fixtures.
side_by_side core:core vllm:vllm sglang:sglang llamacpp:core
# The conformance suite in two sessions side by side, each engine in one of them: one engine's
# start-ups, drains and shutdown waits overlap the other's scenarios (about 10 and 14 minutes
# alone). An engine's load and fault scenarios run with and without speculation in the same
# session, so their ratios compare runs under the same load.
apart="tests/conformance/test_vllm.py tests/conformance/test_vllm_offline.py"
apart+=" tests/conformance/test_sglang_offline.py"
side_by_side "conformance-vllm+sglang-offline:core:$apart" \
  "conformance:core:tests/conformance ${apart//tests/--ignore=tests}"
.venvs/core/bin/python ci/reliability.py || status=1
exit $status
