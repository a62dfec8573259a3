# Sourced (not run) by the scripts/gpu_*.sh device calls, from the repository root: what every call on a
# fresh GPU machine does first.
# - test-only wheels staged by scripts/stage_device_wheels.sh (carry ".whl"): expecttest for the OpInfo run;
# - CuPy's compiled kernels from an earlier call (carry ".cupy_cache"; a call brings them back with
#   `tar czf $OUT/cupy_cache.tgz -C ~/.cupy kernel_cache`): no NVRTC compile on a fresh machine;
# - $OUT, the folder whose files the device tool brings back.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PWD:/tmp/site
fi
if [ -f .cupy_cache/cupy_cache.tgz ]; then mkdir -p ~/.cupy && tar xzf .cupy_cache/cupy_cache.tgz -C ~/.cupy; fi
OUT=${OUT:-/tmp/minidl_gpu_out}; mkdir -p "$OUT"
