"""minidl.nn: Module and Parameter, layers, losses, init and functional (PyTorch's names)."""
from .. import backends  # noqa: F401  (so that `minidl.backends.cudnn` is reachable after `import minidl.nn`)
from . import attention, functional, grad, init, utils  # noqa: F401
from .module import Buffer, Module, Parameter, UninitializedParameter, is_lazy  # noqa: F401
from .state_dict import _IncompatibleKeys  # noqa: F401
from . import parameter  # noqa: E402,F401  (torch.nn.parameter)
from .layers.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .layers.activation import (  # noqa: F401
    ELU, GELU, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, Softmax, Softplus, Tanh,
)
from .layers.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d  # noqa: F401
from .layers.dropout import Dropout, Dropout1d, Dropout2d, Dropout3d  # noqa: F401
from .layers.embedding import Embedding  # noqa: F401
from .layers.linear import Bilinear, Flatten, Identity, LazyLinear, Linear, Unflatten  # noqa: F401
from .layers.lazy import (  # noqa: F401
    LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d,
    LazyConvTranspose2d, LazyConvTranspose3d, LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d,
)
from .layers.loss import (  # noqa: F401
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss,
)
from .layers.normalization import (  # noqa: F401
    BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm, LocalResponseNorm, RMSNorm, SyncBatchNorm,
)
from .layers.pooling import (  # noqa: F401
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d,
    MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d,
)
from .layers.padding import (  # noqa: F401
    CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d, ReflectionPad1d,
    ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d,
    ZeroPad3d,
)
from .layers.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: F401
from .layers.transformer import (  # noqa: F401
    MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer,
)
from .parallel import DataParallel  # noqa: F401,E402
from .layers.composite import (  # noqa: F401,E402  (torch.nn's long tail: nn/layers/composite.py)
    CELU, GLU, SELU, EmbeddingBag, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, CosineEmbeddingLoss, CosineSimilarity, GaussianNLLLoss, GroupNorm, Hardshrink, Hardsigmoid,
    Hardswish, Hardtanh, HingeEmbeddingLoss, HuberLoss, CTCLoss, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, KLDivLoss,
    LogSigmoid, MarginRankingLoss, Mish, MultiLabelSoftMarginLoss, PairwiseDistance, ParameterDict, ParameterList,
    Fold, PixelShuffle, PixelUnshuffle, PoissonNLLLoss, Unfold, PReLU, SiLU, Softmin, SoftMarginLoss, Softshrink, Softsign,
    Tanhshrink, Threshold, TripletMarginLoss, Upsample, UpsamplingBilinear2d, UpsamplingNearest2d,
)
from .layers.longtail import (  # noqa: F401,E402  (more of the long tail: nn/layers/longtail.py)
    AlphaDropout, ChannelShuffle, FeatureAlphaDropout, LPPool1d, LPPool2d, LPPool3d, MultiLabelMarginLoss, MultiMarginLoss,
    RReLU, Softmax2d, TripletMarginWithDistanceLoss,
)
from .layers.adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: F401,E402
from .hooks import RemovableHandle  # noqa: F401,E402
