"""The layers are the folders, and imports only run down them (docs/DESIGN.md): the primitive library
never imports the framework, autograd never imports nn. Checked statically over every import
statement of every module, the lazy ones inside functions included, so that a Tensor method cannot
quietly reach up into nn again (issue 18)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "minidl"

# package -> the minidl packages it must never import (directly or through a lazy import)
FORBIDDEN = {
    "minidl.primitives": ("minidl.autograd", "minidl.nn", "minidl.optim", "minidl.amp", "minidl.data",
                          "minidl.vision", "minidl.profiler", "minidl._graphs", "minidl.run"),
    # the autograd core knows no operation: minidl/ops binds them onto Tensor (issue 23)
    "minidl.autograd": ("minidl.ops", "minidl.nn", "minidl.optim", "minidl.data", "minidl.vision", "minidl.run"),
    "minidl.ops": ("minidl.nn", "minidl.optim", "minidl.data", "minidl.vision", "minidl.run"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path):
    """(line, absolute module name) of every import in the file; relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            yield node.lineno, target
            for alias in node.names:   # `from .. import nn` imports the package minidl.nn
                yield node.lineno, f"{target}.{alias.name}"


def _violations(package):
    bad = []
    for path in sorted((ROOT.parent / package.replace(".", "/")).rglob("*.py")):
        for line, target in imported_modules(path):
            for forbidden in FORBIDDEN[package]:
                if target == forbidden or target.startswith(forbidden + "."):
                    bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_only_run_down_the_layers(package):
    assert _violations(package) == []


def test_the_check_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    """The checker itself: a lazy relative import of nn inside a function is found."""
    pkg = tmp_path / "minidl" / "autograd"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("def relu(x):\n    from ..nn import functional as F\n    return F.relu(x)\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path / "minidl", raising=False)
    global ROOT
    saved, ROOT = ROOT, tmp_path / "minidl"
    try:
        assert _violations("minidl.autograd") == ["minidl/autograd/bad.py:2 imports minidl.nn",
                                                  "minidl/autograd/bad.py:2 imports minidl.nn.functional"]
    finally:
        ROOT = saved


def test_functional_exports_functions_only():
    """F.<name> is always a function: no autograd Function class (F.Linear used to be one while
    nn.Linear is a Module); every name in __all__ exists and is callable."""
    import inspect

    import minidl.nn.functional as F
    from minidl.autograd.function import Function

    classes = [n for n, v in vars(F).items() if inspect.isclass(v) and issubclass(v, Function)]
    assert classes == []
    assert all(callable(getattr(F, n)) and not inspect.isclass(getattr(F, n)) for n in F.__all__)
    for module in ("dense", "activations", "losses", "sparse", "vision", "convolution", "pooling",
                   "normalization", "dropouts", "recurrent"):
        assert module not in F.__all__ and not callable(getattr(F, module))   # a family, never a function


# ------------------------------------------------------------------------------------------------
# Private names stay inside the package that owns them (issue 23)
# ------------------------------------------------------------------------------------------------


def _is_module(dotted: str) -> bool:
    path = ROOT.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_owner(dotted: str):
    """The package allowed to use `dotted` (a module, or a name in one), or None when nothing in it is
    private. A `_private` module belongs to the package it sits in; a `_private` name defined in a module
    belongs to that module's package (so its sibling modules and subpackages may use it). What a package
    means others to use it exports under a public name (e.g. minidl.primitives.as_tuple)."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            if _is_module(".".join(parts[: i + 1])):
                return ".".join(parts[:i])
            holder = ".".join(parts[:i])                 # the module (or package) defining the name
            return holder if (ROOT.parent.joinpath(*parts[:i]) / "__init__.py").exists() else holder.rsplit(".", 1)[0]
    return None


def private_imports_across_packages(path: Path, name: str | None = None):
    """(line, what) for every `from X import name` in the file that reaches a private module or name
    owned by a package the file is not inside. `name`: the file's module name (default: from its path)."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not target.startswith("minidl"):
            continue
        for alias in node.names:
            dotted = target if alias.name == "*" else f"{target}.{alias.name}"
            owner = private_owner(dotted)
            if owner is not None and package != owner and not package.startswith(owner + "."):
                yield node.lineno, dotted


def test_no_private_name_is_imported_across_a_package_line():
    bad = [f"{path.relative_to(ROOT.parent)}:{line} imports {what}"
           for path in sorted(ROOT.rglob("*.py")) for line, what in private_imports_across_packages(path)]
    assert bad == [], "\n".join(bad)


def test_the_private_rule_sees_modules_and_names(tmp_path):
    assert private_owner("minidl.primitives._common.as_tuple") == "minidl.primitives"     # a private module
    assert private_owner("minidl.nn.functional.convolution.conv_nd") is None            # public all the way
    assert private_owner("minidl.nn.layers.normalization._BatchNorm") == "minidl.nn.layers"  # a private name
    assert private_owner("minidl._device") == "minidl"                                  # a private top-level module
    offender = tmp_path / "probe.py"   # read as if it were minidl/nn/probe.py
    offender.write_text("from ..primitives._common import as_tuple\nfrom ..ops._dims import normalize_dim\n")
    found = [what for _, what in private_imports_across_packages(offender, "minidl.nn.probe")]
    assert found == ["minidl.primitives._common.as_tuple", "minidl.ops._dims.normalize_dim"]
