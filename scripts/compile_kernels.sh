#!/usr/bin/env bash
# Compile every kernels/*.cu for sm_90 with nvcc (as NVRTC does at run time: device code only; with
# MINIDL_INSTANTIATE_ALL, files that list their template instantiations compile every one of them), two
# files at a time. Fails if any kernel does not compile, printing nvcc's errors for it.
# Usage: bash scripts/compile_kernels.sh [-v]     (-v adds -Xptxas -v: registers and spills)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
compile_one() {
  local f=$1 out=$2 verbose=$3 name
  name=$(basename "$f" .cu)
  # A file whose first line says "// minidl: arch sm_90a" (wgmma, setmaxnreg) is built for that target.
  local arch=-arch=sm_90
  if head -1 "$f" | grep -q "minidl: arch sm_90a"; then arch=-gencode=arch=compute_90a,code=sm_90a; fi
  if nvcc $arch --std=c++17 -DMINIDL_INSTANTIATE_ALL -I kernels -c "$f" -o "$out/$name.o" ${verbose:+-Xptxas -v} 2>"$out/$name.err"; then
    echo "compiled $f"
  else
    echo "FAILED to compile $f:"; cat "$out/$name.err"; return 1
  fi
}
export -f compile_one
# The largest files first, so that the two workers finish together.
ls -S kernels/*.cu | xargs -P "${MINIDL_COMPILE_JOBS:-2}" -I{} bash -c 'compile_one "$@"' _ {} "$out" "${1:-}"
