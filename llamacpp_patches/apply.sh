#!/usr/bin/env bash
# Apply the series to a llama.cpp tree at the pinned commit.
#
#   apply.sh LLAMA_CPP_DIR            git checkout: HEAD becomes pin + series (git am)
#   apply.sh --patch LLAMA_CPP_DIR    any tree at the pin (e.g. the sdist's vendor/llama.cpp): patch -p1
#
# In git mode the series is applied with `git am` onto the pin in a temporary worktree and the
# checkout then moves to the result, so only files whose content changes are rewritten (an
# incremental build recompiles just those), and re-running with the same series is a no-op.
# A fixed committer and committer date = author date make the commit ids, and so llama.cpp's
# build-info, the same on every machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pin=$(sed -n 's/^commit=//p' "$here/PIN")
shopt -s nullglob
series=("$here"/[0-9][0-9][0-9][0-9]-*.patch)

mode=git
if [ "${1:-}" = --patch ]; then mode=patch; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--patch] LLAMA_CPP_DIR" >&2; exit 2; }
dir="$(cd "$1" && pwd)"

if [ "$mode" = patch ]; then
  for p in "${series[@]}"; do
    patch -p1 --forward --batch --silent -d "$dir" < "$p" || { echo "apply.sh: $(basename "$p") does not apply to $dir (is it the pristine tree at $pin?)" >&2; exit 1; }
  done
  echo "applied ${#series[@]} patches to $dir with patch -p1"
  exit 0
fi

git -C "$dir" cat-file -e "$pin^{commit}" 2>/dev/null \
  || { echo "apply.sh: $dir does not contain the pinned commit $pin" >&2; exit 1; }
git -C "$dir" diff-index --quiet HEAD -- \
  || { echo "apply.sh: $dir has uncommitted changes; commit or discard them first" >&2; exit 1; }

export GIT_COMMITTER_NAME="llamacpp_patches" GIT_COMMITTER_EMAIL="llamacpp_patches@localhost"
git -C "$dir" worktree prune  # entries of runs that were interrupted
tmp="$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-am.XXXXXX")"
cleanup() { git -C "$dir" worktree remove --force "$tmp/wt" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
git -C "$dir" worktree add -q --detach "$tmp/wt" "$pin"
if [ ${#series[@]} -gt 0 ]; then
  git -C "$tmp/wt" -c core.hooksPath=/dev/null am -q --committer-date-is-author-date "${series[@]}" \
    || { echo "apply.sh: the series does not apply to $pin (see git am output above)" >&2; exit 1; }
fi
target=$(git -C "$tmp/wt" rev-parse HEAD)
if [ "$(git -C "$dir" rev-parse HEAD)" != "$target" ]; then
  git -C "$dir" checkout -q --detach "$target"
fi
echo "$dir is at $(git -C "$dir" rev-parse --short=12 HEAD): $pin + ${#series[@]} patches"
