"""torch.nn.parameter's names: Parameter, Buffer, UninitializedParameter (a lazy layer's parameter before its first
input) and is_lazy. They live in minidl/nn/module.py, with the Module that registers them."""
from .module import Buffer, Parameter, UninitializedParameter, is_lazy  # noqa: F401

__all__ = ["Parameter", "Buffer", "UninitializedParameter", "is_lazy"]
