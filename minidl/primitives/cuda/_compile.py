"""Run-time compilation of the CUDA sources in kernels/ through CuPy's RawModule (NVRTC).

Each kernel family lives in one file, kernels/<family>.cu. A family is compiled the first time one
of its kernels is asked for, then kept for the life of the process (CuPy also caches the compiled
binary on disk, in ~/.cupy/kernel_cache, so a second process skips NVRTC). `precompile()` compiles
every family up front, so that tutorials and benchmarks never time a compile.

Thread safety: the cache is guarded by a lock, so several Python threads may ask for kernels at once;
each family is compiled exactly once per (device, options).
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

import cupy

from .. import _common
from ._launch import Kernel


_lock = threading.Lock()
_modules: dict = {}
_functions: dict = {}   # (family, name, options, name expressions, device) -> the kernel function

# Options common to every family. -std=c++17 for constexpr/templates; fast math is NOT used, so the
# kernels agree with the NumPy reference to float32 rounding.
BASE_OPTIONS = ("--std=c++17",)


def kernels_dir() -> Path:
    """Where the .cu sources are: inside the installed wheel (minidl/_kernels), or the repo's kernels/."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "_kernels", here.parents[3] / "kernels"):
        if candidate.is_dir() and any(candidate.glob("*.cu")):
            return candidate
    raise FileNotFoundError(
        "minidl: cannot find the CUDA kernel sources (kernels/*.cu). Looked in "
        f"{here.parents[2] / '_kernels'} and {here.parents[3] / 'kernels'}; reinstall minidl."
    )


# A family whose first line says "// minidl: arch sm_90a" uses instructions that exist only on that
# target (wgmma, setmaxnreg: kernels/gemm_wgmma.cu); it is compiled with this option, which NVRTC honours
# beside the -arch=sm_XX CuPy adds. scripts/compile_kernels.sh reads the same line.
ARCH_MARKER = re.compile(r"^//\s*minidl:\s*arch\s+(sm_\w+)")
_INCLUDE = re.compile(r'^#include\s+"([\w.]+)"\s*$', re.M)


def source_with_includes(path: Path, seen=None) -> str:
    """The text of a kernel source with its local #include "x.cuh" files written in (each once).

    CuPy's disk cache keys a binary by the source text it was given; handing it the expanded text makes
    an edit to a shared header recompile every family that includes it, instead of loading a stale
    binary."""
    seen = set() if seen is None else seen

    def expand(match):
        name = match.group(1)
        header = path.parent / name
        if not header.exists():
            return match.group(0)
        if name in seen:
            return f"// (#include \"{name}\": already written in above)"
        seen.add(name)
        return f"// ---- {name} ----\n" + source_with_includes(header, seen) + f"\n// ---- end of {name} ----"

    return _INCLUDE.sub(expand, path.read_text())


def family_options(path: Path) -> tuple:
    """Compiler options a family's source asks for on its first line (see ARCH_MARKER)."""
    with open(path) as f:
        match = ARCH_MARKER.match(f.readline())
    return (f"-arch={match.group(1)}",) if match else ()


def kernel_families() -> list[str]:
    return sorted(p.stem for p in kernels_dir().glob("*.cu"))


def get_module(family: str, options: tuple = (), name_expressions: tuple = ()) -> "cupy.RawModule":
    """The compiled RawModule of kernels/<family>.cu, compiled once per device and option set."""
    device = cupy.cuda.Device().id
    key = (family, device, tuple(options), tuple(name_expressions))
    module = _modules.get(key)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(key)
        if module is None:
            source_dir = kernels_dir()
            path = source_dir / f"{family}.cu"
            if not path.exists():
                raise FileNotFoundError(f"minidl: no kernel family {family!r} ({path} does not exist)")
            module = cupy.RawModule(
                code=source_with_includes(path),
                options=BASE_OPTIONS + (f"-I{source_dir}",) + family_options(path) + tuple(options),
                name_expressions=tuple(name_expressions) or None,
            )
            variant = " ".join(o for o in options if o.startswith("-D"))
            what = f"kernels/{family}.cu" + (f" ({variant})" if variant else "")
            _common.run_with_compile_notice(what, module.compile)
            _modules[key] = module
    return module


def get_kernel(family: str, name: str, options: tuple = (), name_expressions: tuple = ()):
    """A `__global__` function of kernels/<family>.cu (for templates, pass its name expression), as a
    _launch.Kernel: CuPy's RawKernel, launched with its arguments packed in one buffer. A launcher may keep
    what this returns in a launch plan (the kernel is the same object every time for the same key); every launch
    goes through Kernel.__call__, which is where minidl.profiler counts them."""
    key = (family, name, options, name_expressions, cupy.cuda.runtime.getDevice())
    kernel = _functions.get(key)
    if kernel is None:
        kernel = _functions[key] = Kernel(get_module(family, options, name_expressions).get_function(name))
    return kernel


def get_template_kernel(family: str, expression: str):
    """The instantiation `expression` (e.g. "batch_norm_apply<2>") of a template kernel of kernels/<family>.cu:
    NVRTC compiles it by that name."""
    return get_kernel(family, expression, name_expressions=(expression,))


def precompile(families=None) -> list[str]:
    """Compile every kernel family now (or the given ones). Returns the families compiled."""
    families = list(families) if families is not None else kernel_families()
    for family in families:
        get_module(family)
    return families
