"""Small helpers shared by the tutorial notebooks: the run mode, the device label, figure stamps,
timing, and showing two pieces of source code side by side.

The notebooks import this module from their first cell (it sits next to them in tutorials/). It
holds nothing a learner needs to read to follow a tutorial: the minidl code each tutorial is about
is shown in the notebook itself.
"""
from __future__ import annotations

import datetime
import html
import inspect
import os
import platform
import re
import statistics
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
KERNELS_DIR = REPO_ROOT / "kernels"
MODES = ("small", "full")


# ----------------------------------------------------------------------------------------------
# The mode and the device
# ----------------------------------------------------------------------------------------------


def tutorial_mode() -> str:
    """MINIDL_TUTORIAL_MODE: "small" (default; a few seconds on a CPU, as in CI) or "full"."""
    mode = os.environ.get("MINIDL_TUTORIAL_MODE", "small").strip().lower()
    if mode not in MODES:
        raise ValueError(f"MINIDL_TUTORIAL_MODE must be 'small' or 'full', got {mode!r}")
    return mode


def gpu_status(mode: str) -> tuple[bool, str]:
    """(use the GPU?, why not). Small mode never touches the GPU, even where there is one."""
    if mode != "full":
        return False, "small mode runs on the CPU only (set MINIDL_TUTORIAL_MODE=full to use a GPU)"
    import minidl

    if not minidl.cuda.is_available():
        return False, f"no usable GPU here: {minidl.cuda.unavailable_reason()}"
    return True, ""


class Setup(tuple):
    """What setup() found: (mode, use_gpu, device, why_not_gpu), also by name."""

    __slots__ = ()

    def __new__(cls, mode, use_gpu, device, why_not_gpu):
        return super().__new__(cls, (mode, use_gpu, device, why_not_gpu))

    mode = property(lambda self: self[0])
    use_gpu = property(lambda self: self[1])
    device = property(lambda self: self[2])
    why_not_gpu = property(lambda self: self[3])


def setup(precompile=None) -> Setup:
    """The first cell of every tutorial: the mode (MINIDL_TUTORIAL_MODE, "small" by default), whether
    the GPU cells run and why not, and the label every table and figure is stamped with. Prints one
    line saying so; silences tqdm's "no ipywidgets" warning (tqdm.auto falls back to a text bar).

    precompile: kernel families to compile now when the GPU is used (None: none; "all": every one),
    so that no timing below includes an NVRTC compile.

        MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile=["gemm"])
    """
    import warnings

    from tqdm import TqdmWarning

    warnings.filterwarnings("ignore", category=TqdmWarning)
    mode = tutorial_mode()
    use_gpu, why_not = gpu_status(mode)
    device = device_label(use_gpu)
    print(f"mode={mode}; {device}" + ("" if use_gpu else f" (GPU cells skipped: {why_not})"))
    if use_gpu and precompile is not None:
        import minidl

        minidl.cuda.precompile() if precompile == "all" else minidl.cuda.precompile(list(precompile))
    return Setup(mode, use_gpu, device, why_not)


def rel_err(a, b) -> float:
    """||a - b|| / ||b|| in float64, for NumPy or CuPy arrays (or anything np.asarray takes)."""
    a, b = (np.asarray(v.get() if hasattr(v, "get") else v, dtype=np.float64) for v in (a, b))
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_label(use_gpu: bool) -> str:
    """A one-line description of where the numbers were measured."""
    if use_gpu:
        import minidl

        return f"GPU: {minidl.cuda.get_device_name(0)}"
    return f"CPU: {cpu_name()} ({os.cpu_count()} logical cores)"


def today() -> str:
    return datetime.date.today().isoformat()


# The datasets load_dataset() replaced by a synthetic stand-in in this process (a notebook's kernel):
# from then on every stamp() says so, so no figure of made-up data passes for one of the real data.
SYNTHETIC_DATA: list[str] = []


def stamp(fig, device: str, mode: str) -> None:
    """Write the device, the date and the mode in the figure's bottom-right corner, so that a saved
    plot always says where and when its numbers were measured. Once load_dataset() has fallen back
    to synthetic data, the stamp also says SYNTHETIC (in red, with the datasets it stands in for)."""
    fig.text(0.99, 0.005, f"{device} | {today()} | mode={mode}", ha="right", va="bottom",
             fontsize=7, color="0.35")
    if SYNTHETIC_DATA:
        fig.text(0.01, 0.005, f"SYNTHETIC data (stand-in for {', '.join(SYNTHETIC_DATA)})", ha="left",
                 va="bottom", fontsize=8, color="tab:red", fontweight="bold")


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def time_cpu_ms(fn, repeats: int = 5, warmup: int = 1) -> float:
    """The best (smallest) wall-clock milliseconds of fn() over `repeats` calls, after `warmup`.

    On a CPU shared with other processes, interference only ever adds time (a BLAS thread that
    has to wait for a core costs a whole scheduler slice), so the minimum is the measurement least
    disturbed by the rest of the machine.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times)


def time_gpu_ms(fn, repeats: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of fn() on the GPU, each call bracketed by CUDA events.

    The warm-up calls include the first NVRTC compile of a kernel, which must never be timed.
    Events measure the GPU's own clock: Python's launch overhead is included only where it stalls
    the GPU (a tiny kernel finishes before Python launches the next one).
    """
    import cupy

    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


# ----------------------------------------------------------------------------------------------
# Showing code
# ----------------------------------------------------------------------------------------------


def kernel_source(family: str) -> str:
    """The text of kernels/<family>.cu (or a .cuh header when the name ends in .cuh)."""
    name = family if family.endswith((".cu", ".cuh")) else f"{family}.cu"
    return (KERNELS_DIR / name).read_text()


def cuda_function(family: str, name: str) -> str:
    """The source of one function of kernels/<family>.cu, from its signature line to its closing
    brace at column 0, with the comment block just above it."""
    return cuda_excerpt(family, rf"\b{re.escape(name)}\s*\(")


def cuda_excerpt(family: str, first_line: str) -> str:
    """The definition that starts at the first line matching the regex `first_line` (a function or a
    struct), through its closing brace at column 0, with the comment and template lines above it."""
    lines = kernel_source(family).splitlines()
    pattern = re.compile(first_line)
    for i, line in enumerate(lines):
        if pattern.search(line) and not line.lstrip().startswith("//") and not line.rstrip().endswith(";"):
            start = i
            while start > 0 and (lines[start - 1].startswith("//") or lines[start - 1].startswith("extern")
                                 or lines[start - 1].startswith("template")
                                 or lines[start - 1].startswith("__device__")):
                start -= 1
            end = i
            while end < len(lines) and lines[end] not in ("}", "};"):
                end += 1
            return "\n".join(lines[start:end + 1])
    raise ValueError(f"cuda_excerpt: no line matching {first_line!r} in kernels/{family}")


def header_comment(family: str) -> str:
    """The comment block a kernel file opens with: the algorithm and the thread mapping."""
    out = []
    for line in kernel_source(family).splitlines():
        if not line.startswith("//"):
            break
        out.append(line)
    return "\n".join(out)


def python_source(*objects) -> str:
    return "\n\n".join(inspect.getsource(obj).rstrip() for obj in objects)


class SideBySide:
    """Two code listings in two columns (HTML in Jupyter), or one after the other as text."""

    def __init__(self, left_title: str, left: str, right_title: str, right: str):
        self.left_title, self.left, self.right_title, self.right = left_title, left, right_title, right

    def __repr__(self):
        bar = "=" * 100
        return f"{bar}\n{self.left_title}\n{bar}\n{self.left}\n\n{bar}\n{self.right_title}\n{bar}\n{self.right}"

    def _repr_html_(self):
        def column(title, text):
            return (f"<td style='vertical-align:top;width:50%'><b>{html.escape(title)}</b>"
                    f"<pre style='font-size:11px;line-height:1.25;overflow-x:auto'>{html.escape(text)}</pre></td>")

        return ("<table style='width:100%;table-layout:fixed'><tr>"
                + column(self.left_title, self.left) + column(self.right_title, self.right) + "</tr></table>")


class Table:
    """A list of rows as a table: HTML in Jupyter, aligned text elsewhere (no pandas needed)."""

    def __init__(self, header, rows, title: str = ""):
        self.header = [str(h) for h in header]
        self.rows = [[_cell(v) for v in row] for row in rows]
        self.title = title

    def __repr__(self):
        widths = [max(len(r[i]) for r in [self.header] + self.rows) for i in range(len(self.header))]
        line = "  ".join(h.ljust(w) for h, w in zip(self.header, widths))
        body = ["  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(r, widths)) for r in self.rows]
        return "\n".join(([self.title] if self.title else []) + [line, "-" * len(line)] + body)

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in self.rows)
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.3g}" if abs(v) < 1e-2 or abs(v) >= 1e5 else f"{v:.3f}".rstrip("0").rstrip(".")
    return str(v)


def _numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def python_function_from_file(relative_path: str, name: str) -> str:
    """The source of a top-level function or class of a repository file, without importing it
    (minidl/primitives/cuda/* imports CuPy, which a CPU-only machine does not have)."""
    import ast

    text = (REPO_ROOT / relative_path).read_text()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_source_segment(text, node)
    raise ValueError(f"python_function_from_file: no {name!r} in {relative_path}")


# CUDA device attribute numbers (cudaDeviceAttr), for a CuPy whose Device().attributes lacks a name.
_CUDA_ATTRIBUTES = {"ClockRate": 13, "MultiProcessorCount": 16, "MaxThreadsPerMultiProcessor": 39,
                    "ComputeCapabilityMajor": 75, "ComputeCapabilityMinor": 76,
                    "MaxSharedMemoryPerMultiprocessor": 81, "MaxRegistersPerMultiprocessor": 82,
                    "MaxBlocksPerMultiprocessor": 106}


def gpu_attribute(name: str):
    """One attribute of the current GPU by its CUDA name, e.g. "MultiProcessorCount"."""
    import cupy

    device = cupy.cuda.Device()
    attributes = device.attributes
    if name in attributes:
        return attributes[name]
    return cupy.cuda.runtime.deviceGetAttribute(_CUDA_ATTRIBUTES[name], device.id)


def find_cuda_function(name: str, missing_ok: bool = False) -> tuple[str, str]:
    """(file name, source) of the `__global__`/device function `name`, wherever it is in kernels/.

    With missing_ok, a function that is not there gives ("?", a note saying so) instead of an error,
    so that a notebook still runs (and says what it could not show) while the kernels are reworked.
    """
    for path in sorted(KERNELS_DIR.glob("*.cu*")):
        if re.search(rf"\b{re.escape(name)}\s*\(", path.read_text()):
            try:
                return path.name, cuda_function(path.name, name)
            except ValueError:
                continue
    if missing_ok:
        return "?", (f"// MISSING: no function {name} in kernels/*.cu when this notebook ran.\n"
                     f"// The text above describes it; the GPU launcher minidl/primitives/cuda/ calls it by this name.")
    raise ValueError(f"find_cuda_function: no function {name!r} in {KERNELS_DIR}")


# ----------------------------------------------------------------------------------------------
# Data for the training tutorials (04-06): the real datasets, or a small synthetic stand-in
# ----------------------------------------------------------------------------------------------


def load_dataset(mode: str, name: str, load, synthesize):
    """(dataset, is_real). `load(download=...)` reads the real dataset from minidl's data root
    ($MINIDL_DATA, else ~/.cache/minidl). Full mode may download and fails loudly without the data;
    small mode never downloads and, when the data is not on disk, prints a note and returns
    `synthesize()` instead, so that the notebook still runs anywhere."""
    from minidl.data import DatasetNotFoundError, data_root

    try:
        return load(download=(mode == "full")), True
    except (DatasetNotFoundError, FileNotFoundError) as e:
        if mode == "full":
            raise
        first_line = str(e).split(". ")[0]
        print(f"NOTE: {name} is not under the data root {data_root()} ({first_line}).\n"
              f"      Small mode goes on with small SYNTHETIC data instead: the code is the same, the numbers "
              f"are not {name}'s.\n      Set MINIDL_DATA to a folder holding {name} to use the real data.")
        if name not in SYNTHETIC_DATA:
            SYNTHETIC_DATA.append(name)   # every figure stamped from now on says SYNTHETIC
        return synthesize(), False


class SyntheticImages:
    """A stand-in for MNIST / CIFAR10 with the attributes the notebooks use: `data` uint8 (N, H, W)
    or (N, H, W, C), `targets` int64 (N,), `classes`.

    Each class is a smooth random template; a sample is its class's template, shifted by up to 2
    pixels, plus noise: learnable, not trivial. The templates are the data set (they depend on
    `template_seed` and the shape only); `seed` draws one split's samples from them. So a training
    split and a test split made with two seeds hold different images of the same classes, and what
    a model learns on one carries over to the other, as with the real data.
    """

    def __init__(self, n: int, shape: tuple, classes, seed: int = 0, template_seed: int = 0):
        import numpy as np

        H, W = shape[:2]
        C = shape[2] if len(shape) == 3 else 1
        coarse = np.random.default_rng([template_seed, H, W, C, len(classes)]).random((len(classes), H // 4, W // 4, C))
        templates = coarse.repeat(4, axis=1).repeat(4, axis=2)           # (K, H, W, C), blocky blobs
        rng = np.random.default_rng(seed)
        self.targets = rng.integers(0, len(classes), size=n).astype(np.int64)
        images = templates[self.targets]
        for axis in (1, 2):                                               # a random shift per sample
            shifts = rng.integers(-2, 3, size=n)
            images = np.stack([np.roll(img, s, axis=axis - 1) for img, s in zip(images, shifts)])
        images = 0.75 * images + 0.25 * rng.random(images.shape)
        self.data = (255 * images).astype(np.uint8)
        if len(shape) == 2:
            self.data = self.data[..., 0]
        self.classes = list(classes)

    def __len__(self):
        return int(self.data.shape[0])

    def __repr__(self):
        return f"SyntheticImages(samples={len(self)}, shape={self.data.shape[1:]}, classes={len(self.classes)})"


_SPEAKERS = ["ROMEO", "JULIET", "HAMLET", "OPHELIA", "KING HENRY", "QUEEN", "MERCUTIO", "FIRST CITIZEN"]
_WORDS = ("the and of to my thou thee thy love night day sweet lord good heart death king fair what is "
          "not be with me you that this shall will come go hath doth art o no yes here there now "
          "never ever blood crown sword grace honour tongue eyes heaven").split()


def synthetic_play(n_chars: int, seed: int = 0) -> str:
    """About n_chars of fake play text (speaker lines and verses) for when Tiny Shakespeare is absent.
    Words follow a fixed random bigram table, so there is structure for a model to learn."""
    import numpy as np

    rng = np.random.default_rng(seed)
    successors = {w: rng.choice(_WORDS, size=3, replace=False) for w in _WORDS}
    parts, length = [], 0
    while length < n_chars:
        lines = []
        for _ in range(rng.integers(1, 4)):
            word = rng.choice(_WORDS)
            words = [word]
            for _ in range(rng.integers(3, 9)):
                word = rng.choice(successors[word])
                words.append(word)
            lines.append(" ".join(words).capitalize() + rng.choice([",", ".", ";", "!", "?"]))
        block = f"{rng.choice(_SPEAKERS)}:\n" + "\n".join(lines) + "\n\n"
        parts.append(block)
        length += len(block)
    return "".join(parts)[:n_chars]


def write_synthetic_text(folder, n_chars: int = 60_000, seed: int = 0) -> Path:
    """Write synthetic_play text to folder/input.txt (a file CharCorpus reads); returns the path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "input.txt"
    path.write_text(synthetic_play(n_chars, seed))
    return path


def write_synthetic_ptb(folder, sentences=(3000, 300, 300), seed: int = 0) -> Path:
    """Write train.txt, valid.txt, test.txt of lower-case bigram sentences in PTB's form (one sentence a
    line, rare words as <unk>) into folder, a layout WordCorpus reads; returns the folder."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = [w for w in _WORDS if w != "o"] + ["<unk>", "N"]
    successors = {w: rng.choice(vocab, size=4, replace=False) for w in vocab}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in zip(("train.txt", "valid.txt", "test.txt"), sentences):
        lines = []
        for _ in range(count):
            word = rng.choice(vocab)
            words = [word]
            for _ in range(rng.integers(4, 15)):
                word = rng.choice(successors[word])
                words.append(word)
            lines.append(" " + " ".join(words) + " ")
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder
