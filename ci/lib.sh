# Shared helpers for ci/*.sh. Source it; it sets ROOT and defines the stamp helpers.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="$ROOT/.venvs"
BUILD="$ROOT/build"
PYTHON="${PYTHON:-python3.11}"
mkdir -p "$VENVS" "$BUILD/stamps" "$BUILD/logs"

# A stamp records the sha256 of a step's inputs (files and literal strings);
# a step re-runs only when that digest changed or its output is missing.
inputs_digest() {
  local item
  for item in "$@"; do
    if [ -d "$item" ]; then
      (cd "$item" && git ls-files -z --cached --others --exclude-standard . | sort -z | xargs -0 sha256sum)
    elif [ -f "$item" ]; then sha256sum "$item"
    else printf '%s\n' "$item"; fi
  done | sha256sum | cut -d' ' -f1
}
stamp_current() { [ -f "$BUILD/stamps/$1" ] && [ "$(cat "$BUILD/stamps/$1")" = "$2" ]; }
stamp_write() { printf '%s' "$2" > "$BUILD/stamps/$1"; }

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# make_venv DIR: a fresh virtualenv with a current pip (pip 23's resolver is slow on vLLM's tree).
make_venv() {
  rm -rf "$1"
  "$PYTHON" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
}
