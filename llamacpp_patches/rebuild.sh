#!/usr/bin/env bash
# Configure (if needed) and build, incrementally, the binaries the series touches:
#
#   rebuild.sh LLAMA_CPP_DIR [BUILD_DIR]      (BUILD_DIR defaults to LLAMA_CPP_DIR/build)
#
# JOBS (default 2) sets the parallelism. CMake is re-run every time because llama.cpp bakes
# `git rev-parse HEAD` into its build-info at configure time.
set -euo pipefail
src="$(cd "$1" && pwd)"
bld="${2:-$src/build}"
targets=(llama-server test-arg-parser)

# Offline, CPU-only, no embedded web UI; examples and the unified app binary are not needed.
cmake -S "$src" -B "$bld" -G Ninja -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
cmake --build "$bld" -j "${JOBS:-2}" --target "${targets[@]}"
