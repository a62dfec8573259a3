"""Build the tutorial notebooks from their readable sources.

Each tutorial is written as a percent-format Python file in tutorials/src/ (the format jupytext
reads): `# %%` starts a code cell, `# %% [markdown]` a markdown cell whose lines are comments.
Anything before the first `# %%` is a header for the person editing the file and is not copied.
This script turns tutorials/src/NN_name.py into tutorials/NN_name.ipynb (nbformat 4, no outputs):

    python tutorials/build.py                 # every notebook
    python tutorials/build.py 02              # the ones whose name starts with 02
    python tutorials/build.py --check         # exit 1 if a notebook's cells differ from its source
    python tutorials/build.py --keep-outputs 03   # a text-only edit: keep the saved outputs
    python tutorials/build.py --keep-outputs --refresh-listings 03   # also a changed listing cell

Executed notebooks (outputs saved by tutorials/run.py) keep their outputs only until the next build,
so rebuild, then run. A change to the markdown cells alone does not change what the code prints, so
--keep-outputs carries the saved outputs (and the record of the run) over, when every code cell is
unchanged; when one is not, it builds nothing and says which: that notebook has to be run again.

Listing cells are the exception. A cell marked `# %% tags=["listing"]` only prints source code (a
function's source, a kernel beside its reference): what it prints depends on the code alone, never on
the device, the mode or the data. When such a cell (or the code it lists) changes,
--refresh-listings runs the new notebook once in small mode on this machine, takes the listing cells'
outputs from that run and keeps every other cell's saved outputs (which must be unchanged). So a
renamed function does not cost a GPU rerun of the whole notebook, and no output is kept that the
code would no longer print. Every listing cell is refreshed, changed or not, and a listing cell may be
added or removed this way (the other code cells still must match the saved ones, in order).
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
_TAGS = re.compile(r"tags=(\[[^\]]*\])")
LISTING = "listing"


def parse_percent(text: str) -> list[dict]:
    """Cells of a percent-format file: [{"cell_type": "code"|"markdown", "source": str, "tags": [...]}, ...]
    (`# %% tags=["listing"]` gives a cell its tags, as jupytext writes them)."""
    cells: list[dict] = []
    current = None
    for line in text.splitlines():
        mark = _CELL_MARK.match(line)
        if mark:
            tags = _TAGS.search(mark.group(1))
            current = {"cell_type": "markdown" if "[markdown]" in mark.group(1) else "code", "lines": [],
                       "tags": json.loads(tags.group(1)) if tags else []}
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
            out.append({"cell_type": cell["cell_type"], "source": "\n".join(lines), "tags": cell["tags"]})
    return out


def _source_lines(text: str) -> list[str]:
    """The notebook format stores a cell's source as a list of lines, each but the last with '\\n'."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + [lines[-1]]


def make_notebook(cells: list[dict], stem: str) -> dict:
    nb_cells = []
    for i, cell in enumerate(cells):
        metadata = {"tags": list(cell["tags"])} if cell.get("tags") else {}
        entry = {"cell_type": cell["cell_type"], "id": f"{stem[:40]}-{i:03d}", "metadata": metadata,
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


def build(source: Path, out_dir: Path | None = None, keep_outputs: bool = False,
          refresh_listings: bool = False) -> Path:
    nb = make_notebook(parse_percent(source.read_text()), source.stem)
    path = (out_dir or TUTORIALS) / f"{source.stem}.ipynb"
    if keep_outputs and path.exists():
        carry_outputs(json.loads(path.read_text()), nb, path.name, listings_changeable=refresh_listings)
        if refresh_listings:
            refresh_listing_outputs(nb, source.stem)
    validate(nb)
    write_notebook(nb, path)
    return path


class CodeChanged(ValueError):
    """--keep-outputs refused: a code cell differs from the one whose outputs are saved."""


def is_listing(cell: dict) -> bool:
    return LISTING in cell.get("metadata", {}).get("tags", [])


def carry_outputs(old: dict, new: dict, name: str, listings_changeable: bool = False) -> None:
    """Copy the outputs and execution counts of `old`'s code cells, and its record of the run, into
    `new`, whose code cells must be exactly `old`'s (only the markdown may differ; with
    `listings_changeable`, listing cells may differ too: the caller refreshes their outputs)."""
    old_code = [c for c in old["cells"] if c["cell_type"] == "code"]
    new_code = [c for c in new["cells"] if c["cell_type"] == "code"]
    if listings_changeable:
        # Listing cells may also be added or removed: their outputs come from the refresh run. The other
        # code cells must still be exactly the saved ones, in order.
        old_code = [c for c in old_code if not is_listing(c)]
        new_code = [c for c in new_code if not is_listing(c)]
    if len(old_code) != len(new_code):
        raise CodeChanged(f"{name}: {len(new_code)} code cells, the saved notebook has {len(old_code)}; run it again")
    for i, (a, b) in enumerate(zip(old_code, new_code)):
        if "".join(a["source"]) != "".join(b["source"]) and not (listings_changeable and is_listing(b)):
            hint = " (a listing cell: add --refresh-listings)" if is_listing(b) else ""
            raise CodeChanged(f"{name}: code cell {i + 1} changed, so its saved outputs are stale; run it again{hint}")
        b["outputs"], b["execution_count"] = a.get("outputs", []), a.get("execution_count")
    executed = old.get("metadata", {}).get("minidl", {}).get("executed")
    if executed is not None:
        new["metadata"]["minidl"]["executed"] = executed


def refresh_listing_outputs(nb: dict, stem: str) -> None:
    """Run `nb` once in small mode (tutorials/run.py's builtin executor, in a scratch copy next to the
    notebooks so its first cell finds tutorial_utils.py) and put that run's outputs into `nb`'s listing
    cells. A listing prints source code only, so this run's text is what any run would print."""
    import os

    sys.path.insert(0, str(TUTORIALS))
    import run  # tutorials/run.py

    listings = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and is_listing(c)]
    if not listings:
        return
    scratch = TUTORIALS / f".refresh_{stem}.ipynb"
    saved_mode = os.environ.get("MINIDL_TUTORIAL_MODE")
    try:
        write_notebook(nb, scratch)
        fresh = run.execute_notebook(scratch, executor="builtin", mode="small", quiet=False)
    finally:
        scratch.unlink(missing_ok=True)
        if saved_mode is None:
            os.environ.pop("MINIDL_TUTORIAL_MODE", None)
        else:
            os.environ["MINIDL_TUTORIAL_MODE"] = saved_mode
    for i in listings:
        cell, ran = nb["cells"][i], fresh["cells"][i]
        cell["outputs"] = ran.get("outputs", [])
        if cell.get("execution_count") is None:
            cell["execution_count"] = ran.get("execution_count")
        print(f"  refreshed listing cell {i} ({len(cell['outputs'])} output(s))")


def cell_sources(nb: dict) -> list[tuple[str, str, list]]:
    return [(c["cell_type"], "".join(c["source"]), c.get("metadata", {}).get("tags", [])) for c in nb["cells"]]


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
    parser.add_argument("--refresh-listings", action="store_true",
                        help="with --keep-outputs: rerun the notebook in small mode here and take the listing "
                             "cells' outputs (source listings) from that run; the other code cells must be unchanged")
    args = parser.parse_args(argv)
    if args.refresh_listings and not args.keep_outputs:
        parser.error("--refresh-listings refreshes the saved outputs of listing cells: give --keep-outputs too")
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
            built = build(source, keep_outputs=args.keep_outputs, refresh_listings=args.refresh_listings)
            print(f"built {built.relative_to(TUTORIALS.parent)}")
        except CodeChanged as e:
            print(f"not built: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
