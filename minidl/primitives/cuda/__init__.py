"""CuPy launchers of the CUDA kernels in kernels/. Imported only when a CuPy array reaches a primitive."""
