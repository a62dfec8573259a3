"""Build the tutorial notebooks from their readable sources.

Each tutorial is written as a percent-format Python file in tutorials/src/ (the format jupytext
reads): `# %%` starts a code cell, `# %% [markdown]` a markdown cell whose lines are comments.
Anything before the first `# %%` is a header for the person editing the file and is not copied.
This script turns tutorials/src/NN_name.py into tutorials/NN_name.ipynb (nbformat 4, no outputs):

    python tutorials/build.py                 # every notebook
    python tutorials/build.py 02              # the ones whose name starts with 02
    python tutorials/build.py --check         # exit 1 if a notebook's cells differ from its source
    python tutorials/build.py --keep-outputs 03   # a text-only edit: keep the saved outputs

Executed notebooks (outputs saved by tutorials/run.py) keep their outputs only until the next build,
so rebuild, then run. A change to the markdown cells alone does not change what the code prints, so
--keep-outputs carries the saved outputs (and the record of the run) over, when every code cell is
unchanged; when one is not, it builds nothing and says which: that notebook has to be run again.
The notebook JSON is written directly (the format is small and stable);
nbformat validates it when it is installed.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

TUTORIALS = Path(__file__).resolve().parent
SOURCES = TUTORIALS / "src"

_CELL_MARK = re.compile(r"^# %%(.*)$")


def parse_percent(text: str) -> list[dict]:
    """Cells of a percent-format file: [{"cell_type": "code"|"markdown", "source": str}, ...]."""
    cells: list[dict] = []
    current = None
    for line in text.splitlines():
        mark = _CELL_MARK.match(line)
        if mark:
            current = {"cell_type": "markdown" if "[markdown]" in mark.group(1) else "code", "lines": []}
            cells.append(current)
            continue
        if current is None:
            continue  # the editing header
        if current["cell_type"] == "markdown":
            if line.strip() and not line.startswith("#"):
                raise ValueError(f"markdown cell line does not start with '#': {line!r}")
            line = line[2:] if line.startswith("# ") else line[1:]
        current["lines"].append(line)
    out = []
    for cell in cells:
        lines = cell["lines"]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if lines:
            out.append({"cell_type": cell["cell_type"], "source": "\n".join(lines)})
    return out


def _source_lines(text: str) -> list[str]:
    """The notebook format stores a cell's source as a list of lines, each but the last with '\\n'."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def make_notebook(cells: list[dict], stem: str) -> dict:
    nb_cells = []
    for i, cell in enumerate(cells):
        entry = {"cell_type": cell["cell_type"], "id": f"{stem[:40]}-{i:03d}", "metadata": {},
                 "source": _source_lines(cell["source"])}
        if cell["cell_type"] == "code":
            entry["execution_count"] = None
            entry["outputs"] = []
        nb_cells.append(entry)
    return {
        "cells": nb_cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "pygments_lexer": "ipython3"},
            "minidl": {"source": f"tutorials/src/{stem}.py",
                       "note": "built by tutorials/build.py; edit the source, not this file"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def validate(nb: dict) -> None:
    """Check the notebook against the nbformat schema when nbformat is installed."""
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.from_dict(nb))


def write_notebook(nb: dict, path: Path) -> None:
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def sources(prefixes=()) -> list[Path]:
    found = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    if prefixes:
        found = [p for p in found if any(p.stem.startswith(pre) for pre in prefixes)]
    return found


def notebook_path(source: Path) -> Path:
    return TUTORIALS / f"{source.stem}.ipynb"


def build(source: Path, out_dir: Path | None = None, keep_outputs: bool = False) -> Path:
    nb = make_notebook(parse_percent(source.read_text()), source.stem)
    path = (out_dir or TUTORIALS) / f"{source.stem}.ipynb"
    if keep_outputs and path.exists():
        carry_outputs(json.loads(path.read_text()), nb, path.name)
    validate(nb)
    write_notebook(nb, path)
    return path


class CodeChanged(ValueError):
    """--keep-outputs refused: a code cell differs from the one whose outputs are saved."""


def carry_outputs(old: dict, new: dict, name: str) -> None:
    """Copy the outputs and execution counts of `old`'s code cells, and its record of the run, into
    `new`, whose code cells must be exactly `old`'s (only the markdown may differ)."""
    old_code = [c for c in old["cells"] if c["cell_type"] == "code"]
    new_code = [c for c in new["cells"] if c["cell_type"] == "code"]
    if len(old_code) != len(new_code):
        raise CodeChanged(f"{name}: {len(new_code)} code cells, the saved notebook has {len(old_code)}; run it again")
    for i, (a, b) in enumerate(zip(old_code, new_code)):
        if "".join(a["source"]) != "".join(b["source"]):
            raise CodeChanged(f"{name}: code cell {i + 1} changed, so its saved outputs are stale; run it again")
        b["outputs"], b["execution_count"] = a.get("outputs", []), a.get("execution_count")
    executed = old.get("metadata", {}).get("minidl", {}).get("executed")
    if executed is not None:
        new["metadata"]["minidl"]["executed"] = executed


def cell_sources(nb: dict) -> list[tuple[str, str]]:
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def out_of_date(source: Path) -> str | None:
    """None when tutorials/<stem>.ipynb has exactly the source's cells, else why not."""
    path = notebook_path(source)
    if not path.exists():
        return f"{path.name} does not exist"
    built = cell_sources(make_notebook(parse_percent(source.read_text()), source.stem))
    have = cell_sources(json.loads(path.read_text()))
    if built != have:
        for i, (a, b) in enumerate(zip(built, have)):
            if a != b:
                return f"{path.name}: cell {i} differs from {source.name}"
        return f"{path.name}: {len(have)} cells, {source.name} has {len(built)}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefixes", nargs="*", help="only notebooks whose name starts with one of these")
    parser.add_argument("--check", action="store_true", help="only check that the notebooks match their sources")
    parser.add_argument("--keep-outputs", action="store_true",
                        help="keep the saved outputs where only markdown changed (refuses where code changed)")
    args = parser.parse_args(argv)
    found = sources(args.prefixes)
    if not found:
        print(f"build.py: no source matches {args.prefixes} in {SOURCES}", file=sys.stderr)
        return 1
    if args.check:
        problems = [p for p in (out_of_date(s) for s in found) if p]
        for problem in problems:
            print(f"out of date: {problem} (run python tutorials/build.py)", file=sys.stderr)
        return 1 if problems else 0
    status = 0
    for source in found:
        try:
            print(f"built {build(source, keep_outputs=args.keep_outputs).relative_to(TUTORIALS.parent)}")
        except CodeChanged as e:
            print(f"not built: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
