"""The files one steady-state training step enters, traced with sys.setprofile, against the lists in
docs/DESIGN.md ("The files a step enters, traced"): the walk the documentation describes is the walk the
code takes. Each case is forward + .sum() + backward on the CPU, after warm-up. A new file on the path, a
file no longer entered, a change of order, or more re-entries than written there fails, saying what to
update."""
import os
import re
import sys
from pathlib import Path

import pytest

import minidl
import minidl.nn as nn

ROOT = Path(minidl.__file__).resolve().parent
DESIGN = Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md"


def documented():
    """{case: (files in first-entry order, re-entry ceiling)} from DESIGN.md's ```call-path blocks."""
    out = {}
    for name, body in re.findall(r"```call-path (\w+)\n(.*?)```", DESIGN.read_text(), re.S):
        files_text, reentries = body.split("re-entries:")
        out[name] = (files_text.replace("files:", "").split(), int(reentries.strip()))
    return out


def trace(step):
    """The minidl files a call of step() enters (first-entry order) and how often it re-enters one."""
    sequence = []

    def profile(frame, event, arg):
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(str(ROOT)):
                rel = os.path.relpath(filename, ROOT).replace(os.sep, "/")
                if not sequence or sequence[-1] != rel:
                    sequence.append(rel)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(previous)
    first, reentries = [], 0
    for f in sequence:
        if f in first:
            reentries += 1
        else:
            first.append(f)
    return first, reentries


def _steps():
    minidl.manual_seed(0)
    conv, x = nn.Conv2d(3, 4, 3), minidl.randn(2, 3, 8, 8)
    lstm, s = nn.LSTM(4, 5), minidl.randn(6, 2, 4)
    a, b = minidl.randn(3, 4, requires_grad=True), minidl.randn(4, 5, requires_grad=True)
    return {"conv2d": lambda: conv(x).sum().backward(), "lstm": lambda: lstm(s)[0].sum().backward(),
            "matmul": lambda: (a @ b).sum().backward()}


def test_design_md_documents_the_three_walks():
    assert set(documented()) == {"conv2d", "lstm", "matmul"}


@pytest.mark.parametrize("case", ["conv2d", "lstm", "matmul"])
def test_a_step_enters_the_documented_files(case):
    step = _steps()[case]
    for _ in range(3):   # steady state: plans made, kernels chosen, caches warm
        step()
    files, reentries = trace(step)
    want, ceiling = documented()[case]
    assert files == want, (f"the {case} step now enters {files} (first-entry order); docs/DESIGN.md lists {want}: "
                           "update the ```call-path block there (and the walk's prose) to what the code does")
    assert reentries <= ceiling, (f"the {case} step re-enters files {reentries} times, more than the {ceiling} "
                                  "docs/DESIGN.md allows: a change added back-and-forth calls between files")
