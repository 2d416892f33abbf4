#!/usr/bin/env bash
# build/llama.cpp: the pinned llama.cpp (vendored in the llama-cpp-python sdist) + llamacpp_patches,
# built as build/llama.cpp/build/bin/{llama-server,test-*}. The converter
# (build/llama.cpp/convert_hf_to_gguf.py) runs from .venvs/core with the tree's own gguf-py.
# Cold: about 5 minutes on 2 cores; a changed series rebuilds incrementally in the same dir.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
patches="$ROOT/llamacpp_patches"
src="$BUILD/llama.cpp"
commit=$(sed -n 's/^commit=//p' "$patches/PIN")
sdist=$(sed -n 's/^sdist=//p' "$patches/PIN")
sdist_sha256=$(sed -n 's/^sdist_sha256=//p' "$patches/PIN")

shopt -s nullglob
digest=$(inputs_digest "$ROOT/ci/setup/llamacpp.sh" "$patches/PIN" "$patches/apply.sh" "$patches/rebuild.sh" \
  "$patches"/[0-9][0-9][0-9][0-9]-*.patch)
if stamp_current llamacpp "$digest" && [ -x "$src/build/bin/llama-server" ]; then say "llama.cpp ready"; exit 0; fi

if ! git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then
  say "fetching $sdist"
  cache="$BUILD/downloads/$sdist"
  tarball=("$cache"/*.tar.gz)
  if [ ${#tarball[@]} -eq 0 ]; then
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: "$sdist" -d "$cache"
    tarball=("$cache"/*.tar.gz)
  fi
  echo "$sdist_sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "$tarball does not match sdist_sha256 in llamacpp_patches/PIN" >&2; exit 1; }
  # The sdist ships vendor/llama.cpp as a submodule checkout whose .git is a gitfile pointing at
  # the superproject's .git/modules/vendor/llama.cpp (shallow, with the pinned commit's objects).
  # Fetching the pin from there gives a self-contained repository with HEAD at the pin.
  tmp=$(mktemp -d "$BUILD/llamacpp-sdist.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  top=$(basename "$tarball" .tar.gz)
  tar xzf "$tarball" -C "$tmp" "$top/.git"
  mkdir -p "$tmp/$top/vendor/llama.cpp"  # the module's core.worktree must exist for git to open it
  rm -rf "$src"
  git init -q "$src"
  git -C "$src" fetch -q --no-tags --update-shallow "$tmp/$top/.git/modules/vendor/llama.cpp" "$commit"
  git -C "$src" checkout -q --detach FETCH_HEAD
  rm -rf "$tmp"
  trap - EXIT
fi
[ "$(git -C "$src" rev-parse "$commit")" = "$commit" ] || { echo "build/llama.cpp lacks $commit" >&2; exit 1; }

say "applying llamacpp_patches"
"$patches/apply.sh" "$src"
say "building llama-server (log: build/logs/llamacpp-build.log)"
nice -n 10 "$patches/rebuild.sh" "$src" > "$BUILD/logs/llamacpp-build.log" 2>&1 \
  || { tail -n 30 "$BUILD/logs/llamacpp-build.log" >&2; exit 1; }
"$src/build/bin/llama-server" --version >/dev/null 2>&1
stamp_write llamacpp "$digest"
say "llama.cpp ready: $src/build/bin/llama-server"
