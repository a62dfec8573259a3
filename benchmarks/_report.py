"""What every benchmark report records about where it ran: the commit."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_commit(given: str | None = None) -> str:
    """The commit to write in a report: `given` (--commit), else $MINIDL_COMMIT (set by
    scripts/gpu_report.py on the GPU machine, whose copy of the tree has no .git), else
    `git rev-parse --short HEAD`, else "unknown"."""
    if given:
        return given
    if os.environ.get("MINIDL_COMMIT"):
        return os.environ["MINIDL_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip() or "unknown"
    except Exception:
        return "unknown"
