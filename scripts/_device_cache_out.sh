# Sourced at the end of a device call (after scripts/_device_setup.sh): the CuPy kernels this call compiled
# (newer than the marker _device_setup.sh left) as $OUT/cupy_cache_<name>.tgz. Copy it into .cupy_cache/
# here and the next fresh machine compiles none of them.
#   . scripts/_device_cache_out.sh delta1
( cd ~/.cupy && find kernel_cache -type f -newer /tmp/minidl_cache_marker > /tmp/minidl_cache_new.txt \
  && [ -s /tmp/minidl_cache_new.txt ] && tar czf "$OUT/cupy_cache_${1:-delta}.tgz" -T /tmp/minidl_cache_new.txt \
  && echo "kernel cache delta: $(wc -l < /tmp/minidl_cache_new.txt) files, $(du -h "$OUT/cupy_cache_${1:-delta}.tgz" | cut -f1)" )
