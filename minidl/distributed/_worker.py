"""python -m minidl.distributed._worker script.py [args]: how the launcher runs one rank under mpiexec.

It runs the script as `python script.py` would (runpy, as __main__), and when the script raises or exits
with a non-zero code it calls MPI_Abort with that code: mpiexec then stops every other rank at once, instead
of leaving them waiting in a collective for a rank that is gone (mpi4py's `python -m mpi4py` does the same).
"""
from __future__ import annotations

import runpy
import sys
import time
import traceback


def _abort(code: int):
    sys.stdout.flush()
    sys.stderr.flush()
    # mpiexec forwards each rank's output through its proxy; MPI_Abort ends the proxy too, and output still in
    # flight is lost. A moment's pause lets the last lines (the error's message) reach the terminal.
    time.sleep(0.3)
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(code)


def main():
    args = sys.argv[1:]
    if not args:
        print("usage: python -m minidl.distributed._worker script.py [args] (the launcher runs this)", file=sys.stderr)
        sys.exit(2)
    module = args[0] == "-m"
    if module:
        args = args[1:]
    sys.argv = args
    try:
        if module:
            runpy.run_module(args[0], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(args[0])))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code in (None, 0):
            return
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        _abort(code)
    except BaseException as exc:
        # the one line that says what went wrong first, then the traceback
        rank = __import__("os").environ.get("RANK", "?")
        print(f"minidl.distributed: rank {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exc()
        _abort(1)


if __name__ == "__main__":
    main()
