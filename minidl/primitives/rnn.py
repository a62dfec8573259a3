"""Placeholder: filled in by the rnn work."""
__all__ = []
