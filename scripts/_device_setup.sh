# Sourced (not run) by the scripts/gpu_*.sh device calls, from the repository root: what every call on a
# fresh GPU machine does first.
# - test-only wheels staged by scripts/stage_device_wheels.sh (carry ".whl"): expecttest for the OpInfo run;
# - CuPy's compiled kernels from an earlier call (carry ".cupy_cache"; a call brings them back with
#   scripts/_device_cache_out.sh: only what a call compiled): no NVRTC compile on a fresh machine;
# - $OUT, the folder whose files the device tool brings back.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
# Every tarball in .cupy_cache, in name order: the base one, then the deltas later calls brought back
# (scripts/_device_cache_out.sh writes one: the kernels this call compiled, nothing else).
mkdir -p ~/.cupy
for t in .cupy_cache/*.tgz; do [ -f "$t" ] && tar xzf "$t" -C ~/.cupy; done
touch /tmp/minidl_cache_marker
OUT=${OUT:-/tmp/minidl_gpu_out}; mkdir -p "$OUT"
