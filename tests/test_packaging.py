"""Packaging: every subpackage is listed in pyproject.toml, and a built wheel carries the CUDA sources."""
import glob
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def listed_packages():
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M).group(1)
    return set(re.findall(r'"([\w.]+)"', block))


def test_every_subpackage_is_listed_in_pyproject():
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "minidl").rglob("__init__.py")}
    assert listed_packages() == found | {"minidl._kernels"}


def test_wheel_carries_the_kernel_sources(tmp_path):
    """A non-editable install must find kernels/*.cu at minidl/_kernels (see cuda/_compile.py)."""
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError:
        pytest.skip("setuptools/wheel not installed: cannot build without network isolation")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    names = zipfile.ZipFile(glob.glob(str(tmp_path / "*.whl"))[0]).namelist()
    shipped = {Path(n).name for n in names if n.startswith("minidl/_kernels/")}
    sources = {p.name for p in (ROOT / "kernels").iterdir() if p.suffix in (".cu", ".cuh")}
    assert sources and shipped == sources
