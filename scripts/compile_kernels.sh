#!/usr/bin/env bash
# Compile every kernels/*.cu for sm_90 with nvcc (as NVRTC does at run time: device code only).
# Fails on the first kernel that does not compile. Usage: bash scripts/compile_kernels.sh [-v]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
status=0
for f in kernels/*.cu; do
  [ -e "$f" ] || continue
  if nvcc -arch=sm_90 --std=c++17 -I kernels -c "$f" -o "$out/$(basename "$f" .cu).o" ${1:+-Xptxas -v} 2>"$out/err.txt"; then
    echo "compiled $f"
  else
    echo "FAILED to compile $f:"; cat "$out/err.txt"; status=1
  fi
done
rm -rf "$out"
exit $status
