"""minidl.nn.functional: the stateless side of nn, with torch.nn.functional's names and signatures.

Each op here is an autograd Function (forward and backward on plain arrays) over one primitive of
`minidl.primitives`, so on the GPU the forward and the backward run our own CUDA kernels:

    activations        -> activation_forward / activation_backward   (ActivationDescriptor)
    softmax, log_softmax -> softmax_forward / softmax_backward
    conv1d/2d/3d       -> convolution_forward / _backward_data / _backward_filter / _backward_bias
    pooling            -> pooling_forward / pooling_backward, adaptive_avg_pooling_*
    batch_norm         -> batch_norm_forward_training / _inference / batch_norm_backward
    local_response_norm -> lrn_forward / lrn_backward
    dropout            -> dropout_forward / dropout_backward (the mask is regenerated, never stored)
    linear             -> gemm (our SGEMM on the GPU, or our tensor-core GEMM for TF32 / float16 /
                          bfloat16; cuBLAS with minidl.backends.cuda.use_cublas)

The rest (the losses, embedding, pad, one_hot) is ordinary array math written once for NumPy
and CuPy. Losses are fused: cross_entropy is one Function whose backward is (softmax - target) scaled,
instead of a chain of small ops each saving its own intermediate.

Arguments are checked here, at the framework boundary, before any computation; shape errors that
only the primitive knows about come from the primitive, naming it and the shapes.

The package, one module per family (in the order a layer's call meets them; a module is never named
after one of its functions, so `F.linear` is always the function):

    _checks.py        argument checks shared by every family, the losses' reduction, unbatched inputs
    dense.py          linear
    activations.py    relu6, leaky_relu, elu, gelu, add_relu; relu, sigmoid, tanh, softmax and
                      log_softmax come from minidl/ops/activation.py (Tensor methods use them)
    losses.py         cross_entropy, nll_loss, mse_loss, l1_loss, smooth_l1_loss,
                      binary_cross_entropy_with_logits
    sparse.py         embedding, one_hot
    vision.py         pad
    convolution.py    conv1d, conv2d, conv3d, conv2d_relu
    pooling.py        max/avg/adaptive_avg pooling, max_unpool
    normalization.py  batch_norm, batch_norm_relu, local_response_norm, layer_norm, rms_norm
    dropouts.py       dropout
    recurrent.py      the RNN/LSTM/GRU Functions (the layers are in nn/layers/rnn.py)
    longtail.py       more of it: channel_shuffle, alpha_dropout, rrelu, lp_pool*, the margin losses, pdist
    composite.py      the long tail composed of minidl's ops: silu, mish, hardswish, ..., normalize, group_norm,
                      instance_norm, cosine_similarity, kl_div, huber_loss, ..., pixel_shuffle
    resample.py       interpolate (nearest, linear, bilinear, bicubic, trilinear, area), upsample

This namespace holds the functions only. The autograd Functions behind them (Convolution, Pooling,
CrossEntropy, ...) stay in their family's module (F.convolution.Convolution): several share a name
with an nn layer (Linear, Embedding, Dropout, Softmax, NLLLoss, LocalResponseNorm), which made
`F.Linear` a Function and `nn.Linear` a Module.
"""
from __future__ import annotations

from .activations import (add_relu, elu, gelu, leaky_relu, log_softmax, relu, relu6, sigmoid, softmax, softplus,
                          tanh)
from .convolution import conv1d, conv2d, conv2d_relu, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .attention import multi_head_attention_forward, scaled_dot_product_attention
from .ctc import ctc_loss
from .dense import bilinear, linear
from .dropouts import dropout, dropout1d, dropout2d, dropout3d
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     nll_loss, smooth_l1_loss)
from .normalization import batch_norm, batch_norm_relu, layer_norm, local_response_norm, rms_norm
from .pooling import (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool1d, avg_pool2d,
                      avg_pool3d, max_pool1d, max_pool2d, max_pool3d, max_unpool1d, max_unpool2d, max_unpool3d)
from .sparse import embedding, one_hot
from .vision import pad
from .patches import fold, unfold
from . import recurrent  # noqa: F401  (the RNN Functions; nn/layers/rnn.py uses them)
from . import composite  # noqa: E402
from .composite import (  # noqa: F401  (the long tail, composed of the ops above: composite.py)
    adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, affine_grid, celu, embedding_bag, grid_sample, gumbel_softmax, cosine_embedding_loss, cosine_similarity, gaussian_nll_loss, glu, group_norm, hardshrink, hardsigmoid,
    hardswish, hardtanh, hinge_embedding_loss, huber_loss, instance_norm, kl_div, logsigmoid,
    margin_ranking_loss, mish, multilabel_soft_margin_loss, normalize, pairwise_distance, pixel_shuffle,
    pixel_unshuffle, poisson_nll_loss, prelu, selu, silu, soft_margin_loss, softmin, softshrink, softsign, tanhshrink,
    threshold, triplet_margin_loss,
)
from . import resample  # noqa: E402
from .resample import interpolate, upsample, upsample_bilinear, upsample_nearest  # noqa: F401  (resample.py)
from . import longtail  # noqa: E402
from .longtail import (  # noqa: F401  (more of the long tail: longtail.py)
    adaptive_max_pool1d_with_indices, adaptive_max_pool2d_with_indices, adaptive_max_pool3d_with_indices,
    alpha_dropout, celu_, channel_shuffle, elu_, feature_alpha_dropout, hardtanh_, leaky_relu_, lp_pool1d, lp_pool2d,
    lp_pool3d,
    max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices, multi_margin_loss,
    multilabel_margin_loss, pdist, relu_, rrelu, rrelu_, selu_, threshold_, triplet_margin_with_distance_loss,
)

__all__ = [
    "linear", "bilinear",
    "relu", "relu6", "leaky_relu", "elu", "sigmoid", "tanh", "gelu", "add_relu", "softmax", "log_softmax",
    "softplus",
    "cross_entropy", "nll_loss", "mse_loss", "smooth_l1_loss", "l1_loss", "binary_cross_entropy_with_logits",
    "binary_cross_entropy",
    "embedding", "one_hot", "pad", "unfold", "fold",
    "conv1d", "conv2d", "conv2d_relu", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "batch_norm", "batch_norm_relu", "local_response_norm", "layer_norm", "rms_norm",
    "scaled_dot_product_attention", "multi_head_attention_forward",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    *composite.FUNCTIONS,
    *resample.FUNCTIONS,
    *longtail.FUNCTIONS,
]
