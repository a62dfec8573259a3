"""torch.compiler: minidl has no compiler (minidl.compile returns the model as it is), so these are what a program
that marks code for or against compilation needs: the marks change nothing."""
from __future__ import annotations


def disable(fn=None, recursive=True):
    """@torch.compiler.disable: the function as it is (nothing is compiled in minidl)."""
    return fn if fn is not None else (lambda f: f)


def is_compiling() -> bool:
    """False: minidl never traces a program."""
    return False


is_dynamo_compiling = is_compiling


def reset() -> None:
    """Nothing to reset (no compiled graphs are cached)."""


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


__all__ = ["disable", "is_compiling", "is_dynamo_compiling", "reset", "allow_in_graph", "assume_constant_result"]
