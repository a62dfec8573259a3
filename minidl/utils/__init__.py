"""Utilities: gradcheck (autograd vs finite differences) and save/load of checkpoints without pickle."""
from . import dlpack  # noqa: F401
from .graph import Graph, draw_graph  # noqa: F401
from .gradcheck import GradcheckError, gradcheck  # noqa: F401
from .serialization import CheckpointError, load, save  # noqa: F401
