"""Placeholder: filled in by the dropout work."""
__all__ = []
