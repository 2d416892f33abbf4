#!/usr/bin/env bash
# Rewrite the series from a working branch: one patch per commit in PIN..REV.
#
#   regenerate.sh LLAMA_CPP_DIR [REV]      (REV defaults to HEAD)
#
# The output is stable: no signature, zero commit ids, no [PATCH n/m] numbering, full blob ids
# and no rename detection (so `patch -p1` applies every patch), and the user's git
# configuration is ignored. Regenerating an unchanged branch rewrites identical files.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pin=$(sed -n 's/^commit=//p' "$here/PIN")
[ $# -ge 1 ] || { echo "usage: $0 LLAMA_CPP_DIR [REV]" >&2; exit 2; }
dir="$1"
rev="${2:-HEAD}"

git -C "$dir" merge-base --is-ancestor "$pin" "$rev" \
  || { echo "regenerate.sh: $rev does not descend from the pinned commit $pin" >&2; exit 1; }

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
rm -f "$here"/[0-9][0-9][0-9][0-9]-*.patch
git -C "$dir" format-patch -q --no-signature --zero-commit --no-numbered --full-index --no-renames \
  --diff-algorithm=myers --output-directory "$here" "$pin..$rev"
ls "$here"/[0-9][0-9][0-9][0-9]-*.patch | sed "s|^$here/||"
