#!/usr/bin/env bash
# Set up .venv and run the test suite (this is the command README.md gives and CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest tests "$@"
