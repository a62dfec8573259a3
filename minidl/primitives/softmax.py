"""Placeholder: filled in by the softmax work."""
__all__ = []
