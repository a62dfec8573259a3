"""Placeholder: filled in by the convolution work."""
__all__ = []
