"""Optimizers (SGD, Adam, AdamW, RMSprop) and learning-rate schedules, with PyTorch's names and formulas."""
from . import lr_scheduler, swa_utils  # noqa: F401
from .adadelta import Adadelta  # noqa: F401
from .adaptive import ASGD, Adafactor, Adagrad, Adamax, NAdam, RAdam, Rprop, SparseAdam  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .lbfgs import LBFGS  # noqa: F401
from .muon import Muon  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .rmsprop import RMSprop  # noqa: F401
from .sgd import SGD  # noqa: F401
