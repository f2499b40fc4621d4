#!/usr/bin/env bash
# Set up .venv with gymnasium + ALE and run the demo: record real Atari episodes into a store, sample, report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
.venv/bin/python scripts/demo.py "$@"
