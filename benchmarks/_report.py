"""What every benchmark report shares: where it ran (commit, CPU) and how it is written out."""
from __future__ import annotations

import os
import platform
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


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def pin_to_cpu(cpu) -> str:
    """Run this process (both frameworks of a benchmark alike) on one CPU, `cpu` (an int), or leave it free (None);
    returns what to say of it in a report. On the shared GPU hosts an unpinned eager step moves between cores and its
    time is bimodal; pinned, torch's char_gpt step ran 24% faster and minidl's 2% (benchmarks/results/
    gpu_gpt_step.md, session 12), so an eager ratio should say which it was."""
    if cpu is None:
        return "not pinned to a CPU"
    import os

    os.sched_setaffinity(0, {int(cpu)})
    return f"pinned to CPU {int(cpu)} (os.sched_setaffinity)"


def write_report(text: str, out=None) -> None:
    """Print a report and, given a path, write it there (folders made, one trailing newline)."""
    print(text)
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text if text.endswith("\n") else text + "\n")
