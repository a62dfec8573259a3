"""torch.distributed.nn: collectives that autograd goes through (see functional)."""
from . import functional  # noqa: F401
