"""Placeholder: filled in by the pooling work."""
__all__ = []
