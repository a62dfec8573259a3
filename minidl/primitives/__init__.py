"""minidl.primitives: the primitive library, in the spirit of cuDNN.

Each primitive takes plain arrays (NumPy on the CPU, CuPy on the GPU) and descriptors, never framework
tensors, so it can be used and taught on its own. See docs/DESIGN.md for the conventions.
"""
from ._common import as_tuple, get_array_module, is_cuda_array, normalize_layout  # noqa: F401
from .convolution import *  # noqa: F401,F403
from .pooling import *  # noqa: F401,F403
from .activation import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .batch_norm import *  # noqa: F401,F403
from .layer_norm import *  # noqa: F401,F403
from .lrn import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .rnn import *  # noqa: F401,F403
from .gemm import *  # noqa: F401,F403
from .multi_tensor import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .cast import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
