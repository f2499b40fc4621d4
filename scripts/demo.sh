#!/usr/bin/env bash
# Set up .venv with gymnasium + ALE and run the demo: record real Atari episodes into a store, sample, report.
# The store is kept in demo.mmr (--discard: deleted at exit); the demo ends with the mmreplay commands to try on it.
#   bash scripts/demo.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
.venv/bin/python scripts/demo.py "$@"
