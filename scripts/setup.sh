#!/usr/bin/env bash
# Create .venv (if missing) and install mmreplay into it, editable, with the extras named as arguments.
#   bash scripts/setup.sh            # core + test tools
#   bash scripts/setup.sh demo peers # also gymnasium/ALE and the benchmark peers
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
extras="test"
for extra in "$@"; do extras="$extras,$extra"; done
case ",$extras," in
  *,peers,*|*,sb3,*)
    # The CPU build of PyTorch; a bare 'torch' requirement would pull a multi-GB CUDA build.
    .venv/bin/python -m pip install --quiet "torch==2.13.0" ;;
esac
.venv/bin/python -m pip install --quiet -e ".[$extras]"
.venv/bin/python -c "import mmreplay.codec as c; print('mmreplay installed; compiled batch decoder:', 'yes' if getattr(c, 'ACCELERATED', False) else 'no (pure-Python fallback)')"
