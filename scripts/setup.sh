#!/usr/bin/env bash
# Create .venv (if missing) and install mmreplay into it, editable, with the extras named as arguments.
#   bash scripts/setup.sh            # core + test tools
#   bash scripts/setup.sh demo peers # also gymnasium/ALE and the benchmark peers
#   bash scripts/setup.sh --force    # reinstall even when nothing changed
# Returns at once when nothing changed since the last install: .venv/.mmreplay-setup records a hash of
# what the install depends on (pyproject.toml, setup.py, the C sources, the Python version, the C
# compiler, liblz4 and headers found) and the extras installed; a run for extras already installed is
# skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
# PyTorch's own index of CPU-only wheels: the one way to a CPU torch here, in test.sh and in README.md
# (pip's default torch on Linux is the CUDA build, with ~3 GB of NVIDIA libraries).
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
started=$SECONDS
force=0
extras="test"
for argument in "$@"; do
  if [ "$argument" = "--force" ]; then force=1; else extras="$extras,$argument"; fi
done
stamp=.venv/.mmreplay-setup
inputs_hash() {
  {
    cat pyproject.toml setup.py $(find mmreplay/_c -name "*.[ch]" | LC_ALL=C sort)
    python3 -c 'import sys; print(sys.version)'
    # A compiler, liblz4 or a header installed since the last run: build the extensions this time.
    command -v cc gcc clang || true
    { ldconfig -p 2>/dev/null || true; } | grep -F liblz4 || true
    ls /usr/include/lz4.h /usr/include/zlib.h /usr/local/include/lz4.h /usr/local/include/zlib.h 2>/dev/null || true
  } | python3 -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
}
hash=$(inputs_hash)
if [ -x .venv/bin/python ] && [ -f "$stamp" ]; then
  installed=$(sed -n 2p "$stamp")
  missing=""
  for extra in ${extras//,/ }; do
    case ",$installed," in *",$extra,"*) ;; *) missing="$missing $extra" ;; esac
  done
  if [ "$force" = 0 ] && [ -z "$missing" ] && [ "$(sed -n 1p "$stamp")" = "$hash" ]; then
    echo "setup: .venv is up to date (mmreplay[$installed]; 'bash scripts/setup.sh --force' reinstalls)"
    exit 0
  fi
  extras="$extras,$installed"  # what an earlier run installed stays installed, and recorded
fi
extras=$(printf '%s\n' ${extras//,/ } | sort -u | paste -sd, -)
rm -f "$stamp"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv ($(python3 --version); a few seconds)"
  python3 -m venv .venv
fi
echo "setup: upgrading pip and setuptools (expected: under a minute)"
# setuptools too: "python setup.py build_ext --inplace" (the development build) needs the version
# pyproject.toml asks for, which the venv module's bundled one may predate.
.venv/bin/python -m pip install --quiet --upgrade pip "setuptools>=77"
case ",$extras," in
  *,peers,*|*,sb3,*|*,torchrl,*|*,tianshou,*)
    # The CPU build of PyTorch, first: a bare 'torch' requirement of an extra would pull the CUDA build.
    echo "setup: installing PyTorch 2.13.0, CPU build, from $TORCH_CPU_INDEX (expected: 2-5 minutes, ~200 MB; seconds when installed)"
    .venv/bin/python -m pip install --quiet "torch==2.13.0" --index-url "$TORCH_CPU_INDEX" ;;
esac
echo "setup: installing mmreplay[$extras] (editable; compiling its C extensions; expected: 3-6 minutes on a fresh .venv, under a minute after)"
# (setuptools prints an information-only banner about editable installs; it says nothing to act on)
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install --quiet -e ".[$extras]"
# The import warns (PerformanceWarning, with the fix) when a compiled extension could not be built.
.venv/bin/python -c "import mmreplay.extensions as e; print('setup: done in $((SECONDS - started)) s; mmreplay', __import__('mmreplay').__version__ + ':', e.summary())"
printf '%s\n%s\n' "$hash" "$extras" > "$stamp"
