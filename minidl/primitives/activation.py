"""Placeholder: filled in by the activation work."""
__all__ = []
