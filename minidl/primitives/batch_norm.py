"""Placeholder: filled in by the batch_norm work."""
__all__ = []
