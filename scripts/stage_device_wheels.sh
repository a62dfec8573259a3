#!/usr/bin/env bash
# Stage the pure-Python test dependencies the GPU machine lacks into .whl/ (git-ignored), for
# `carry: [".whl"]`: expecttest, which torch's OpInfo database (tests/test_opinfo.py) imports. Without
# it the GPU suite skips the OpInfo module. scripts/gpu_session_check.sh installs what it finds there.
#   bash scripts/stage_device_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -q "^/.whl/" .git/info/exclude 2>/dev/null || grep -q "^.whl/" .gitignore || echo "/.whl/" >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform any -d .whl "expecttest==0.3.0"
ls -la .whl
