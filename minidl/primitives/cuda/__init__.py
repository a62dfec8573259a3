"""CuPy launchers of the CUDA kernels in kernels/. Imported only when a CuPy array reaches a primitive.

What the layers above may use by name (the package's _private modules are its own):"""
from ._compile import precompile  # noqa: F401  (minidl.cuda.precompile: every kernel family compiled now)
from ._launch import check_no_cublas_capture  # noqa: F401  (primitives/attention.py: the reference under capture)
