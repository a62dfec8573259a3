"""Run the GPU checks on a CUDA machine and write their results as markdown, with date, commit and device.

    MINIDL_COMMIT=$(git rev-parse --short HEAD) python3 scripts/gpu_report.py --out benchmarks/results

Steps (each can be skipped): the GPU tests (pytest -m gpu), compute-sanitizer memcheck and racecheck
over the kernel tests, then every benchmarks/bench_gpu_*.py script. Writes <out>/gpu_tests.md (and the
benchmarks write their own tables into <out>), plus full logs next to them. Prints a short summary.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def device_name() -> str:
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        return f"{props['name'].decode()} (cc {props['major']}.{props['minor']}, {props['multiProcessorCount']} SMs), CuPy {cupy.__version__}"
    except Exception as e:  # pragma: no cover - only on broken machines
        return f"unknown ({e})"


def run(cmd, log: Path, timeout: int, env=None) -> tuple[int, float, str]:
    t0 = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\n[timed out after {timeout} s]"
        rc = 124
    log.write_text(out)
    return rc, time.time() - t0, out


def junit_counts(path: Path) -> dict:
    if not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["failed_names"] = [
        f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--commit", default=os.environ.get("MINIDL_COMMIT", "unknown"))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-sanitizer", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--tests", default="tests", help="pytest paths for the GPU tests")
    ap.add_argument("--sanitize", default="tests/gpu", help="pytest arguments run under compute-sanitizer memcheck")
    ap.add_argument("--racecheck", default="tests/gpu", help="pytest arguments run under racecheck")
    ap.add_argument("--sanitizer-timeout", type=int, default=600, help="seconds for each sanitizer tool")
    ap.add_argument("--bench", nargs="*", default=None, help="benchmark scripts (default: benchmarks/bench_gpu_*.py)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# GPU results", "", f"- date: {date}", f"- commit: {args.commit}", f"- device: {device_name()}", ""]
    summary = []

    if not args.skip_tests:
        # Precompile first so no test times out on NVRTC.
        run([sys.executable, "-c", "import minidl; print(minidl.cuda.precompile())"], out / "precompile.log", 600, env)
        xml = out / "gpu_junit.xml"
        rc, secs, _ = run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rfE", "-p", "no:cacheprovider",
                           f"--junitxml={xml}", *shlex.split(args.tests)], out / "gpu_tests.log", 1500, env)
        c = junit_counts(xml)
        passed = c.get("tests", 0) - c.get("failures", 0) - c.get("errors", 0) - c.get("skipped", 0)
        lines += ["## GPU tests (`python3 -m pytest -m gpu " + args.tests + "`)", "",
                  f"{passed} passed, {c.get('failures', 0) + c.get('errors', 0)} failed, {c.get('skipped', 0)} skipped "
                  f"in {secs:.0f} s (exit code {rc})", ""]
        for name in c.get("failed_names", [])[:50]:
            lines.append(f"- FAILED {name}")
        lines.append("")
        summary.append(f"gpu tests: {passed} passed, {c.get('failures', 0) + c.get('errors', 0)} failed (rc {rc})")

    if not args.skip_sanitizer:
        lines += ["## compute-sanitizer", ""]
        for tool in ("memcheck", "racecheck"):
            cmd = ["compute-sanitizer", f"--tool={tool}", "--error-exitcode=99", sys.executable, "-m", "pytest",
                   "-m", "gpu", "-q", "-p", "no:cacheprovider", *shlex.split(args.sanitize if tool == "memcheck" else args.racecheck)]
            rc, secs, text = run(cmd, out / f"sanitizer_{tool}.log", args.sanitizer_timeout, env)
            m = re.findall(r"ERROR SUMMARY: (\d+) error", text) or re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error", text)
            # A run stopped by the timeout has no summary: count the reports it printed so far.
            reported = len(re.findall(r"^========= (Invalid|Race|Error|Program hit|(?!RACECHECK SUMMARY).*hazard)", text, re.M))
            errors = sum(int(x) for x in m) if m else reported
            dots = sum(l.count(".") for l in text.splitlines() if re.fullmatch(r"[.sFE]+( *\[ *\d+%\])?", l.strip()))
            tail = [l for l in text.strip().splitlines() if re.search(r"passed|failed|error", l)][-1:] or ["(no pytest summary)"]
            lines.append(f"- {tool} over `{args.sanitize if tool == 'memcheck' else args.racecheck}`: "
                         f"{'no errors' if errors == 0 else f'{errors} errors'}{'' if m else ' (stopped early: no summary)'}, "
                         f"{dots} tests run, exit code {rc}, {secs:.0f} s; pytest: {tail[0].strip()}")
            summary.append(f"sanitizer {tool}: errors={errors} rc={rc}")
        lines.append("")

    if not args.skip_bench:
        scripts = args.bench if args.bench is not None else sorted(str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("bench_gpu_*.py"))
        lines += ["## Benchmarks", ""]
        for script in scripts:
            name = Path(script).stem
            rc, secs, _ = run([sys.executable, script, "--out", str(out / f"{name.removeprefix('bench_')}.md"),
                               "--commit", args.commit], out / f"{name}.log", 900, env)
            lines.append(f"- `{script}`: exit code {rc}, {secs:.0f} s -> `{name.removeprefix('bench_')}.md`")
            summary.append(f"{script}: rc={rc} ({secs:.0f} s)")
        lines.append("")

    (out / "gpu_tests.md").write_text("\n".join(lines) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
