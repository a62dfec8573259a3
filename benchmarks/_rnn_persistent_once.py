import sys; sys.path.insert(0, ".")
import numpy as np, cupy
from minidl.primitives import RNNDescriptor, rnn_forward, rnn_backward
rng = np.random.default_rng(0)
H, B, T = 512, 64, 36
desc = RNNDescriptor("lstm", H, H, algo="persistent")
w = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(H)).astype(np.float32)) for s in e) for e in desc.weight_shapes()]
x = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
for _ in range(2):
    y, hy, cy, r = rnn_forward(x, None, None, w, desc)
cupy.cuda.Device().synchronize()
