"""Execute tutorial notebooks and save their outputs (text, tables, plots) into them.

    python tutorials/run.py tutorials/01_*.ipynb          # small mode; writes tutorials/executed/01_*.ipynb
    python tutorials/run.py --mode full tutorials/05_*.ipynb
    # on the GPU machine, to refresh the outputs committed with the notebooks:
    MINIDL_TUTORIAL_MODE=full PYTHONPATH=$PWD python3 tutorials/run.py --update-committed tutorials/02_*.ipynb

The committed notebooks hold the outputs of a full run on the GPU machine, so by default the executed
copy goes to tutorials/executed/ (ignored by git) and the committed notebook is left as it is;
--update-committed writes the outputs into the notebooks themselves, --output / --output-dir elsewhere.
Each cell is announced on stderr as it starts and timed when it ends (--quiet: only one line per
notebook), so a long run shows where it is.

Two executors, the same result:

* nbclient (used when nbclient and ipykernel are installed, as in CI): a real Jupyter kernel runs
  the cells, exactly as in the Jupyter UI.
* builtin (used where there is no Jupyter, e.g. the GPU machine; or with --executor builtin): runs
  the code cells in order in one namespace in this process, and records what Jupyter would record:
  stdout and stderr as stream outputs, `display(obj)` calls and the value of a cell's last
  expression (text, plus HTML when the object has `_repr_html_`), and every matplotlib figure,
  rendered to PNG, when `plt.show()` is called or the cell ends.

The mode comes from MINIDL_TUTORIAL_MODE (small|full; --mode sets it). Cells run with the notebook's
folder as the working directory. Any error stops the run: the traceback is printed, the notebook is
left as it was, and the exit status is 1. On success the outputs are written into the notebook (or
to --output), with the mode, date and executor in the notebook's metadata.
"""
from __future__ import annotations

import argparse
import ast
import base64
import builtins
import contextlib
import datetime
import io
import json
import linecache
import os
import platform
import signal
import sys
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT_DIR = Path(__file__).resolve().parent / "executed"   # ignored by git


class NotebookError(RuntimeError):
    """A cell raised. The message names the notebook and the cell and holds the traceback."""


# ----------------------------------------------------------------------------------------------
# Output records, in the notebook format (nbformat 4)
# ----------------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _png_of_figure(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def mime_bundle(obj) -> dict:
    """What Jupyter stores for an object: text/plain always, HTML / PNG / markdown when it has them."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        Figure = ()
    data = {"text/plain": _lines(repr(obj))}
    if Figure and isinstance(obj, Figure):
        data["image/png"] = _png_of_figure(obj)
        return data
    for method, mime in (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
                         ("_repr_png_", "image/png")):
        fn = getattr(obj, method, None)
        if callable(fn):
            value = fn()
            if value is None:
                continue
            if mime == "image/png":
                data[mime] = base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
            else:
                data[mime] = _lines(value)
    return data


class _Stream(io.TextIOBase):
    """A file object that appends what is written to the cell's outputs, merging consecutive writes
    to the same stream into one output (as Jupyter does)."""

    def __init__(self, name: str, outputs: list):
        self.name, self.outputs = name, outputs

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, text):
        if not text:
            return 0
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == self.name:
            last["_text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": self.name, "_text": text})
        return len(text)


def _finish_streams(outputs: list) -> None:
    for out in outputs:
        if "_text" in out:
            out["text"] = _lines(out.pop("_text"))


# ----------------------------------------------------------------------------------------------
# The builtin executor
# ----------------------------------------------------------------------------------------------


class _CellTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    """Raise _CellTimeout in the main thread after `seconds` (POSIX only; no limit elsewhere)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise _CellTimeout(f"cell ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class CellProgress:
    """One line on stderr when a code cell starts ("[3/21] 05_cnn_cifar10 cell 7: def train(...") and
    its time when it ends, so that a run that takes minutes shows where it is. Silent when quiet."""

    def __init__(self, name: str, total: int, quiet: bool = False, stream=None):
        self.name, self.total, self.quiet = name, total, quiet
        self.stream = stream if stream is not None else sys.stderr
        self.count, self._started = 0, None

    def start(self, index: int, source: str) -> None:
        self.count += 1
        self._started = time.perf_counter()
        if self.quiet:
            return
        code = [line.strip() for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        first = code[0] if code else ""
        first = first if len(first) <= 60 else first[:57] + "..."
        self.stream.write(f"[{self.count}/{self.total}] {self.name} cell {index}: {first}")
        self.stream.flush()

    def end(self) -> None:
        if self.quiet or self._started is None:
            return
        self.stream.write(f"  ({time.perf_counter() - self._started:.1f} s)\n")
        self.stream.flush()


def _code_cells(nb: dict) -> int:
    return sum(1 for c in nb["cells"] if c["cell_type"] == "code")


class BuiltinExecutor:
    """Run a notebook's code cells in order, in one namespace, recording their outputs."""

    def __init__(self, nb: dict, workdir: Path, name: str, timeout: float | None = None, quiet: bool = True):
        self.nb, self.workdir, self.name, self.timeout = nb, Path(workdir), name, timeout
        self.progress = CellProgress(Path(name).stem, _code_cells(nb), quiet, stream=sys.stderr)
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}
        self.outputs: list = []
        self.plt = None

    # Figures -------------------------------------------------------------------------------
    def _setup_matplotlib(self):
        os.environ["MPLBACKEND"] = "Agg"  # no display: render to memory
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        self._original_show = plt.show
        plt.show = lambda *args, **kwargs: self._flush_figures()
        return plt

    def _flush_figures(self):
        if self.plt is None:
            return
        for number in self.plt.get_fignums():
            fig = self.plt.figure(number)
            self.outputs.append({"output_type": "display_data", "metadata": {},
                                 "data": {"image/png": _png_of_figure(fig),
                                          "text/plain": [f"<Figure size {fig.get_size_inches()[0]:.0f}x"
                                                         f"{fig.get_size_inches()[1]:.0f} inches>"]}})
        self.plt.close("all")

    def _display(self, *objects, **_):
        for obj in objects:
            self.outputs.append({"output_type": "display_data", "metadata": {}, "data": mime_bundle(obj)})

    # Cells ---------------------------------------------------------------------------------
    def run_cell(self, source: str, filename: str):
        """Execute one cell; return the value of its last expression (None if there is none)."""
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        tree = ast.parse(source, filename=filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is not None:
            return eval(compile(last, filename, "eval"), self.namespace)
        return None

    def execute(self) -> dict:
        saved = (os.getcwd(), list(sys.path), getattr(builtins, "display", None), os.environ.get("MPLBACKEND"))
        os.chdir(self.workdir)
        sys.path[:0] = [str(self.workdir), str(REPO_ROOT)]
        builtins.display = self._display
        self.plt = self._setup_matplotlib()
        try:
            count = 0
            for index, cell in enumerate(self.nb["cells"]):
                if cell["cell_type"] != "code":
                    continue
                count += 1
                source = "".join(cell["source"])
                self.outputs = []
                cell["outputs"], cell["execution_count"] = self.outputs, count
                filename = f"<{self.name} cell {index}>"
                stdout, stderr = _Stream("stdout", self.outputs), _Stream("stderr", self.outputs)
                self.progress.start(index, source)
                try:
                    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                            _time_limit(self.timeout):
                        value = self.run_cell(source, filename)
                        if value is not None:
                            self.outputs.append({"output_type": "execute_result", "execution_count": count,
                                                 "metadata": {}, "data": mime_bundle(value)})
                        self._flush_figures()
                    self.progress.end()
                except BaseException as e:  # noqa: BLE001 - report any failure of the cell, then stop
                    self.progress.end()
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    _finish_streams(self.outputs)
                    frames = e.__traceback__
                    while frames is not None and frames.tb_frame.f_code.co_filename == __file__:
                        frames = frames.tb_next  # the executor's own frames say nothing about the cell
                    tb = traceback.format_exception(type(e), e, frames)
                    printed = "".join("".join(o["text"]) for o in self.outputs if o["output_type"] == "stream")
                    raise NotebookError(
                        f"{self.name}: code cell {count} (cell {index}) failed:\n{''.join(tb)}"
                        f"\n--- what the cell printed (end) ---\n{printed[-3000:]}\n--- cell source ---\n{source}"
                    ) from None
                _finish_streams(self.outputs)
        finally:
            if self.plt is not None:
                self.plt.close("all")
                self.plt.show = self._original_show
            os.chdir(saved[0])
            sys.path[:] = saved[1]
            if saved[2] is None:
                del builtins.display
            else:
                builtins.display = saved[2]
            if saved[3] is None:
                os.environ.pop("MPLBACKEND", None)
            else:
                os.environ["MPLBACKEND"] = saved[3]
        return self.nb


# ----------------------------------------------------------------------------------------------
# The nbclient executor
# ----------------------------------------------------------------------------------------------


def nbclient_available() -> bool:
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError:
        return False
    return True


def execute_nbclient(nb: dict, workdir: Path, name: str, timeout: float | None, quiet: bool = True) -> dict:
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    node = nbformat.reads(json.dumps(nb), as_version=4)   # also joins the sources stored as lists
    # The kernel is a child process and inherits this environment: the mode, and minidl on the path.
    saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "PYTHONPATH")}
    os.environ.pop("MPLBACKEND", None)  # let ipykernel choose its inline backend, so figures are kept
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), saved["PYTHONPATH"]) if p)
    try:
        progress = CellProgress(Path(name).stem, _code_cells(nb), quiet)

        def on_start(cell, cell_index, **_):
            if cell.cell_type == "code":
                progress.start(cell_index, cell.source)

        def on_complete(cell, cell_index, **_):
            if cell.cell_type == "code":
                progress.end()

        client = nbclient.NotebookClient(node, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(workdir)}},
                                         on_cell_start=on_start, on_cell_executed=on_complete)
        client.execute()
    except CellExecutionError as e:
        raise NotebookError(f"{name}: a cell failed:\n{e}") from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return json.loads(nbformat.writes(node))


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------


def execute_notebook(path, executor: str = "auto", timeout: float | None = 600, mode: str | None = None,
                     quiet: bool = True) -> dict:
    """Execute the notebook at `path` and return it (a dict) with its outputs. Raises NotebookError
    when a cell fails. `mode` (small|full) sets MINIDL_TUTORIAL_MODE for the run. Unless `quiet`,
    each cell is announced on stderr when it starts and timed when it ends."""
    path = Path(path)
    nb = json.loads(path.read_text())
    if mode is not None:
        os.environ["MINIDL_TUTORIAL_MODE"] = mode
    if executor == "auto":
        executor = "nbclient" if nbclient_available() else "builtin"
    started = time.perf_counter()
    if executor == "nbclient":
        nb = execute_nbclient(nb, path.parent, path.name, timeout, quiet)
    elif executor == "builtin":
        nb = BuiltinExecutor(nb, path.parent, path.name, timeout, quiet).execute()
    else:
        raise ValueError(f"run.py: unknown executor {executor!r}; use auto, nbclient or builtin")
    nb.setdefault("metadata", {}).setdefault("minidl", {})["executed"] = {
        "mode": os.environ.get("MINIDL_TUTORIAL_MODE", "small"),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "executor": executor,
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    return nb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--mode", choices=("small", "full"), help="overrides MINIDL_TUTORIAL_MODE")
    parser.add_argument("--executor", choices=("auto", "nbclient", "builtin"), default="auto")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per cell (default 1800)")
    parser.add_argument("--output", type=Path, help="write here (one notebook only)")
    parser.add_argument("--output-dir", type=Path,
                        help=f"write each notebook into this folder, same name (default {DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--update-committed", action="store_true",
                        help="write the outputs into the notebooks themselves (what is committed: the GPU "
                             "machine's full runs)")
    parser.add_argument("--quiet", action="store_true", help="no per-cell progress lines, one line per notebook")
    args = parser.parse_args(argv)
    chosen = [flag for flag, value in (("--output", args.output), ("--output-dir", args.output_dir),
                                       ("--update-committed", args.update_committed)) if value]
    if len(chosen) > 1:
        parser.error(f"give one of --output, --output-dir, --update-committed, not {' and '.join(chosen)}")
    if args.output and len(args.notebooks) != 1:
        parser.error("--output needs exactly one notebook")
    if not chosen:
        args.output_dir = DEFAULT_OUTPUT_DIR
    if args.output_dir:
        args.output_dir.mkdir(parents=True, exist_ok=True)
    status = 0
    for path in args.notebooks:
        started = time.perf_counter()
        try:
            nb = execute_notebook(path, args.executor, args.timeout, args.mode, quiet=args.quiet)
        except NotebookError as e:
            print(f"FAILED {path}\n{e}", file=sys.stderr)
            status = 1
            continue
        target = args.output or (args.output_dir / path.name if args.output_dir else path)
        target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        meta = nb["metadata"]["minidl"]["executed"]
        print(f"ran {path} in {time.perf_counter() - started:.1f} s ({meta['executor']}, mode={meta['mode']}) "
              f"-> {target}")
    return status


if __name__ == "__main__":
    sys.exit(main())
