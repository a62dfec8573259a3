"""minidl: a small, real deep learning framework (placeholder until the core lands)."""
