"""Placeholder: filled in by the lrn work."""
__all__ = []
