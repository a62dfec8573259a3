#!/usr/bin/env bash
# The README's test command: install minidl with its dev extra, then run the tests.
# torch is the test oracle (CPU build); it is installed first so the dev extra's range adds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q "torch==2.13.0" || python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
python -m pip install -q -e ".[dev]"
python -m pytest -q -p no:cacheprovider "$@"
