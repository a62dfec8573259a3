"""The files one steady-state training step enters, traced with sys.setprofile, against the lists in
docs/DESIGN.md ("The files a step enters, traced"): the walk the documentation describes is the walk the
code takes. Each case is forward + .sum() + backward on the CPU, after warm-up. A new file on the path, a
file no longer entered, a change of order, or more re-entries than written there fails, saying what to
update. A block that says "one caller: yes" also checks that each file off the tape (autograd/) is entered
from one file only: the walk goes down the layers and back, with no back-and-forth between them."""
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
        one_caller = "one caller: yes" in body
        body = body.replace("one caller: yes", "")
        files_text, reentries = body.split("re-entries:")
        out[name] = (files_text.replace("files:", "").split(), int(reentries.strip()), one_caller)
    return out


TAPE = ("autograd/function.py", "autograd/tensor.py")   # Function.apply and the backward pass call every layer


def entered_from_several(callers):
    """{file: its callers} for the files off the tape that more than one file (or the step itself, None) calls
    into, leaving out calls from the tape."""
    return {f: sorted(map(str, c - set(TAPE))) for f, c in callers.items() if f not in TAPE and len(c - set(TAPE)) > 1}


def _rel(filename):
    return os.path.relpath(filename, ROOT).replace(os.sep, "/") if filename.startswith(str(ROOT)) else None


def trace(step, callers=None):
    """The minidl files a call of step() enters (first-entry order) and how often it re-enters one; callers: a
    dict to fill with {file: the other minidl files that called into it} (None: the step itself)."""
    sequence = []

    def profile(frame, event, arg):
        if event == "call":
            rel = _rel(frame.f_code.co_filename)
            if rel is not None:
                if not sequence or sequence[-1] != rel:
                    sequence.append(rel)
                if callers is not None:
                    caller = _rel(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
                    if caller != rel:
                        callers.setdefault(rel, set()).add(caller)

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
    assert {"conv2d", "lstm", "matmul"} <= set(documented())


@pytest.mark.parametrize("case", ["conv2d", "lstm", "matmul"])
def test_a_step_enters_the_documented_files(case):
    step = _steps()[case]
    for _ in range(3):   # steady state: plans made, kernels chosen, caches warm
        step()
    callers = {}
    files, reentries = trace(step, callers)
    want, ceiling, one_caller = documented()[case]
    assert files == want, (f"the {case} step now enters {files} (first-entry order); docs/DESIGN.md lists {want}: "
                           "update the ```call-path block there (and the walk's prose) to what the code does")
    assert reentries <= ceiling, (f"the {case} step re-enters files {reentries} times, more than the {ceiling} "
                                  "docs/DESIGN.md allows: a change added back-and-forth calls between files")
    if one_caller:
        several = entered_from_several(callers)
        assert not several, (f"the {case} step enters these files from more than one other file (tape calls "
                             f"aside): {several}; docs/DESIGN.md says each is met from one place")


def test_the_one_caller_rule_sees_a_second_caller():
    """The check above can fail: a step that reaches primitives/_common.py from two files is caught."""
    import numpy as np

    from minidl.ops import linalg
    from minidl.primitives import _common

    a = minidl.randn(4, 4)
    callers = {}
    trace(lambda: (_common.get_array_module(np.zeros(1)), linalg.matmul(a, a)), callers)
    assert entered_from_several(callers) == {"primitives/_common.py": ["None", "ops/linalg.py"]}
