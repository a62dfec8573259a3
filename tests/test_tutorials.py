"""The tutorials run: every notebook is built from its source and executed in small mode on the CPU,
and any cell error fails the test. Also tests the two tools that make this possible
(tutorials/build.py and tutorials/run.py's builtin executor) on small notebooks of their own.

The notebooks run with nbclient (a real Jupyter kernel) when nbclient and ipykernel are installed, as
in CI, else with run.py's builtin executor (what the GPU machine, which has no Jupyter, uses).
"""
import base64
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tutorials_{name}", TUTORIALS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load("build")
run = _load("run")
SOURCES = build.sources()


@pytest.fixture
def small_mode(monkeypatch):
    monkeypatch.setenv("MINIDL_TUTORIAL_MODE", "small")


def _outputs(nb):
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]


def _text(nb):
    return "".join("".join(o.get("text", [])) + "".join(o.get("data", {}).get("text/plain", []))
                   for o in _outputs(nb))


def test_there_are_tutorials():
    names = [s.stem for s in SOURCES]
    assert names[:6] == ["01_tensors_and_autograd", "02_gpu_primitives", "03_convolution_algorithms",
                         "04_cnn_mnist", "05_cnn_cifar10", "06_rnns_on_text"], names


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_committed_notebook_matches_its_source(source):
    problem = build.out_of_date(source)
    assert problem is None, f"{problem}: run `python tutorials/build.py`"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_says_at_its_top_what_it_does_on_a_cpu(source):
    """A student on a laptop reads, before running anything, what the notebook will do there and
    how long it takes: a "**Running it on a CPU.**" paragraph among the first cells."""
    top = [c["source"] for c in build.parse_percent(source.read_text())[:3] if c["cell_type"] == "markdown"]
    note = next((text for text in top if "**Running it on a CPU.**" in text), None)
    assert note, f"{source.name}: no '**Running it on a CPU.**' paragraph among its first three cells"
    assert "small mode" in note.lower() and any(u in note for u in (" s ", " s)", "second", "minute", "hour")), note


# The builtin executor always (it is what the GPU machine uses); a Jupyter kernel where installed.
EXECUTORS = ["builtin"] + (["nbclient"] if run.nbclient_available() else [])


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs_in_small_mode(source, executor, small_mode):
    """Build the notebook next to the real ones (so its first cell finds tutorial_utils.py), run it,
    and check that every code cell ran and that it produced figures and text."""
    path = TUTORIALS / f".test_{executor}_{source.stem}.ipynb"
    try:
        build.write_notebook(build.make_notebook(build.parse_percent(source.read_text()), source.stem), path)
        nb = run.execute_notebook(path, executor=executor, timeout=120)
    finally:
        path.unlink(missing_ok=True)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] is not None for c in code)
    errors = [o for o in _outputs(nb) if o["output_type"] == "error"]
    assert not errors, errors
    pngs = [o for o in _outputs(nb) if "image/png" in o.get("data", {})]
    assert pngs, "every tutorial draws at least one figure"
    for o in pngs:
        assert base64.b64decode(o["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    text = _text(nb)
    assert "mode=small" in text
    assert nb["metadata"]["minidl"]["executed"] == {**nb["metadata"]["minidl"]["executed"], "mode": "small",
                                                     "executor": executor}


# ----------------------------------------------------------------------------------------------
# build.py
# ----------------------------------------------------------------------------------------------

PERCENT = '''# header, not copied
# %% [markdown]
# # Title
#
# Some *text*.

# %%
x = 1 + 1
print("x is", x)

# %%
x * 21
'''


def test_parse_percent_splits_cells_and_strips_markdown_comments():
    cells = build.parse_percent(PERCENT)
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code"]
    assert cells[0]["source"] == "# Title\n\nSome *text*."
    assert cells[1]["source"] == 'x = 1 + 1\nprint("x is", x)'
    assert cells[2]["source"] == "x * 21"


def test_parse_percent_rejects_uncommented_markdown():
    with pytest.raises(ValueError, match="does not start with '#'"):
        build.parse_percent("# %% [markdown]\nplain text\n")


def test_built_notebook_is_valid_nbformat(tmp_path):
    nb = build.make_notebook(build.parse_percent(PERCENT), "00_demo")
    assert nb["nbformat"] == 4 and len({c["id"] for c in nb["cells"]}) == 3
    assert "".join(nb["cells"][1]["source"]) == 'x = 1 + 1\nprint("x is", x)'
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.from_dict(nb))


def test_out_of_date_detects_an_edited_cell(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "00_demo.py").write_text(PERCENT)
    monkeypatch.setattr(build, "TUTORIALS", tmp_path)
    build.build(src / "00_demo.py")
    assert build.out_of_date(src / "00_demo.py") is None
    (src / "00_demo.py").write_text(PERCENT.replace("x * 21", "x * 22"))
    assert "cell 2 differs" in build.out_of_date(src / "00_demo.py")


def _saved(nb, outputs):
    """`nb` as if executed: each code cell gets the next of `outputs` as its saved stdout."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for cell, text in zip(code, outputs):
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": [text]}]
        cell["execution_count"] = 1
    return nb


def test_keep_outputs_refuses_a_changed_code_cell_unless_it_is_a_listing():
    listing = PERCENT.replace("# %%\nx * 21", '# %% tags=["listing"]\nx * 21')
    cells = build.parse_percent(listing)
    assert cells[2]["tags"] == ["listing"] and cells[1]["tags"] == []
    old = _saved(build.make_notebook(cells, "00_demo"), ["x is 2\n", "42\n"])
    assert build.is_listing(old["cells"][2]) and not build.is_listing(old["cells"][1])

    # the listing cell changed: refused without the flag (and the message says which flag), kept with it
    edited = build.make_notebook(build.parse_percent(listing.replace("x * 21", "x * 20")), "00_demo")
    with pytest.raises(build.CodeChanged, match="code cell 2 changed.*--refresh-listings"):
        build.carry_outputs(old, edited, "demo")
    build.carry_outputs(old, edited, "demo", listings_changeable=True)
    assert edited["cells"][1]["outputs"][0]["text"] == ["x is 2\n"]

    # an ordinary code cell changed: refused even with the flag (its saved outputs would be stale)
    edited = build.make_notebook(build.parse_percent(listing.replace("1 + 1", "1 + 2")), "00_demo")
    with pytest.raises(build.CodeChanged, match="code cell 1 changed"):
        build.carry_outputs(old, edited, "demo", listings_changeable=True)


def test_only_source_listings_are_tagged_listing():
    """A listing cell's outputs are refreshed by a small CPU run (build.py --refresh-listings), so it
    must print source code only: no data, device or timing may reach it."""
    for source in SOURCES:
        for cell in build.parse_percent(source.read_text()):
            if "listing" in cell["tags"]:
                assert "tu.python_source" in cell["source"] or "tu.SideBySide" in cell["source"], cell["source"]
                for word in ("USE_GPU", "DEVICE", "time_", "MODE", "history"):
                    assert word not in cell["source"], (source.name, word, cell["source"])


# ----------------------------------------------------------------------------------------------
# run.py's builtin executor
# ----------------------------------------------------------------------------------------------

EXEC_SOURCE = '''# %%
import sys
import matplotlib.pyplot as plt
print("hello")
print("to stderr", file=sys.stderr)

# %%
class Rich:
    def __repr__(self):
        return "Rich()"
    def _repr_html_(self):
        return "<b>rich</b>"
display(Rich())
value = 6 * 7
value

# %%
fig, ax = plt.subplots()
ax.plot([1, 2, 3])
plt.show()
print("after the figure")

# %%
silent = 5;

# %%
import os
print(os.environ["MINIDL_TUTORIAL_MODE"], os.path.basename(os.getcwd()))
'''


def _write(tmp_path, source, name="demo.ipynb"):
    path = tmp_path / name
    build.write_notebook(build.make_notebook(build.parse_percent(source), "00_demo"), path)
    return path


def test_builtin_executor_records_streams_displays_results_and_figures(tmp_path, small_mode):
    path = _write(tmp_path, EXEC_SOURCE)
    nb = run.execute_notebook(path, executor="builtin", mode="small")
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4, 5]

    first = cells[0]["outputs"]
    assert [(o["output_type"], o["name"], "".join(o["text"])) for o in first] == [
        ("stream", "stdout", "hello\n"), ("stream", "stderr", "to stderr\n")]

    display_out, result = cells[1]["outputs"]
    assert display_out["output_type"] == "display_data"
    assert display_out["data"]["text/html"] == ["<b>rich</b>"]
    assert result["output_type"] == "execute_result" and result["data"]["text/plain"] == ["42"]
    assert result["execution_count"] == 2

    figure, printed = cells[2]["outputs"]          # plt.show() flushes the figure before the print
    assert base64.b64decode(figure["data"]["image/png"])[:4] == b"\x89PNG"
    assert "".join(printed["text"]) == "after the figure\n"

    assert cells[3]["outputs"] == []               # a trailing semicolon hides the value, as in IPython
    assert "".join(cells[4]["outputs"][0]["text"]) == f"small {tmp_path.name}\n"
    assert nb["metadata"]["minidl"]["executed"]["executor"] == "builtin"
    json.dumps(nb)                                 # everything recorded is JSON


def test_builtin_executor_stops_at_the_first_error_and_names_the_cell(tmp_path, small_mode):
    path = _write(tmp_path, "# %%\nok = 1\n\n# %%\nprint('before')\n1 / 0\n\n# %%\nprint('never')\n")
    with pytest.raises(run.NotebookError, match=r"(?s)code cell 2 .*<demo.ipynb cell 1>.*ZeroDivisionError.*before"):
        run.execute_notebook(path, executor="builtin")


def test_builtin_executor_restores_the_process_state(tmp_path, small_mode):
    cwd, path_before = os.getcwd(), list(sys.path)
    run.execute_notebook(_write(tmp_path, "# %%\nx = 1\n"), executor="builtin")
    assert os.getcwd() == cwd and sys.path == path_before
    import builtins

    assert not hasattr(builtins, "display")


def test_run_main_writes_outputs_in_place_and_fails_with_status_1(tmp_path, small_mode, capsys):
    good = _write(tmp_path, "# %%\nprint('saved')\n", "good.ipynb")
    assert run.main([str(good), "--executor", "builtin", "--update-committed"]) == 0
    assert "saved" in _text(json.loads(good.read_text()))

    bad = _write(tmp_path, "# %%\nraise RuntimeError('boom')\n", "bad.ipynb")
    before = bad.read_text()
    assert run.main([str(bad), "--executor", "builtin", "--update-committed"]) == 1
    assert "boom" in capsys.readouterr().err
    assert bad.read_text() == before               # a failed run leaves the notebook as it was


def test_run_main_leaves_the_committed_notebook_alone_and_shows_each_cell(tmp_path, small_mode, capsys,
                                                                         monkeypatch):
    """By default the executed copy goes to the output folder (tutorials/executed/), not into the
    notebook, whose committed outputs come from the GPU machine; each cell is announced on stderr."""
    monkeypatch.setattr(run, "DEFAULT_OUTPUT_DIR", tmp_path / "executed")
    good = _write(tmp_path, "# %%\nprint('first')\n# %%\nprint('second')\n", "two.ipynb")
    before = good.read_text()
    assert run.main([str(good), "--executor", "builtin"]) == 0
    assert good.read_text() == before
    assert "second" in _text(json.loads((tmp_path / "executed" / "two.ipynb").read_text()))
    err = capsys.readouterr().err
    assert "[1/2] two cell 0: print('first')" in err and "[2/2] two cell 1: print('second')" in err
    assert run.main([str(good), "--executor", "builtin", "--quiet", "--output-dir", str(tmp_path / "o")]) == 0
    assert "[1/2]" not in capsys.readouterr().err and (tmp_path / "o" / "two.ipynb").exists()
    with pytest.raises(SystemExit):
        run.main([str(good), "--update-committed", "--output-dir", str(tmp_path / "o")])


def test_build_keep_outputs_only_when_the_code_is_unchanged(tmp_path):
    source = tmp_path / "src.py"
    source.write_text("# %% [markdown]\n# Title\n# %%\nprint(1)\n")
    path = build.build(source, out_dir=tmp_path)
    nb = json.loads(path.read_text())
    nb["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}]
    nb["metadata"]["minidl"]["executed"] = {"mode": "full"}
    path.write_text(json.dumps(nb))
    source.write_text("# %% [markdown]\n# A better title\n# %%\nprint(1)\n")    # text only: kept
    kept = json.loads(build.build(source, out_dir=tmp_path, keep_outputs=True).read_text())
    assert kept["cells"][0]["source"] == ["A better title"] and kept["cells"][1]["outputs"]
    assert kept["metadata"]["minidl"]["executed"] == {"mode": "full"}
    source.write_text("# %% [markdown]\n# A better title\n# %%\nprint(2)\n")    # code: refused
    with pytest.raises(build.CodeChanged, match="code cell 1 changed"):
        build.build(source, out_dir=tmp_path, keep_outputs=True)
    assert json.loads(path.read_text())["cells"][1]["outputs"], "a refused build writes nothing"


def test_synthetic_images_share_their_classes_across_splits_and_are_learnable():
    """Small mode without the data: a training split and a test split (two seeds) are images of the
    same class templates, so a small model trained on one is far above chance (10%) on the other."""
    import minidl
    import minidl.nn as nn
    import minidl.nn.functional as F

    tu = _tutorial_utils()
    classes = [str(k) for k in range(10)]
    for shape in ((28, 28), (32, 32, 3)):
        train, test = tu.SyntheticImages(500, shape, classes, seed=1), tu.SyntheticImages(300, shape, classes, seed=2)
        assert train.data.shape[1:] == shape and not (train.data[:300] == test.data).all()
        x_train, x_test = (minidl.tensor(d.data.reshape(len(d), -1).astype("float32") / 255 - 0.5)
                           for d in (train, test))
        y_train = minidl.tensor(train.targets)
        minidl.manual_seed(0)
        model = nn.Sequential(nn.Linear(x_train.shape[1], 32), nn.ReLU(), nn.Linear(32, 10))
        optimizer = minidl.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(2):
            for i in range(0, 500, 50):
                loss = F.cross_entropy(model(x_train[i:i + 50]), y_train[i:i + 50])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        accuracy = float((model(x_test).argmax(dim=1).numpy() == test.targets).mean())
        assert accuracy > 0.6, (shape, accuracy)


def test_figures_after_a_synthetic_fallback_are_stamped(monkeypatch, tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tu = _tutorial_utils()
    monkeypatch.setattr(tu, "SYNTHETIC_DATA", [])
    monkeypatch.setenv("MINIDL_DATA", str(tmp_path))
    from minidl.data import DatasetNotFoundError

    def missing(download):
        raise DatasetNotFoundError("MNIST: missing everything")

    def texts(fig):
        return " ".join(t.get_text() for t in fig.texts)

    fig = plt.figure()
    tu.stamp(fig, "CPU", "small")
    assert "SYNTHETIC" not in texts(fig)
    data, real = tu.load_dataset("small", "MNIST", missing, lambda: "stand-in")
    assert (data, real) == ("stand-in", False) and "SYNTHETIC" in capsys.readouterr().out
    fig2 = plt.figure()
    tu.stamp(fig2, "CPU", "small")
    assert "SYNTHETIC data (stand-in for MNIST)" in texts(fig2)
    plt.close("all")


def test_mode_must_be_small_or_full(monkeypatch):
    sys.path.insert(0, str(TUTORIALS))
    try:
        import tutorial_utils
    finally:
        sys.path.remove(str(TUTORIALS))
    monkeypatch.setenv("MINIDL_TUTORIAL_MODE", "huge")
    with pytest.raises(ValueError, match="small' or 'full"):
        tutorial_utils.tutorial_mode()
    monkeypatch.setenv("MINIDL_TUTORIAL_MODE", "small")
    assert tutorial_utils.gpu_status("small")[0] is False


@pytest.mark.skipif(not run.nbclient_available(), reason="needs nbclient and ipykernel")
def test_nbclient_executor_reports_a_failing_cell(tmp_path, small_mode):
    path = _write(tmp_path, "# %%\nraise KeyError('missing piece')\n")
    with pytest.raises(run.NotebookError, match="missing piece"):
        run.execute_notebook(path, executor="nbclient", timeout=60)


def test_run_main_output_dir(tmp_path, small_mode):
    nb = _write(tmp_path, "# %%\n6 * 7\n", "answer.ipynb")
    out = tmp_path / "out"
    assert run.main([str(nb), "--executor", "builtin", "--output-dir", str(out)]) == 0
    assert "42" in _text(json.loads((out / "answer.ipynb").read_text()))
    assert _text(json.loads(nb.read_text())) == ""  # the source notebook is untouched


# ----------------------------------------------------------------------------------------------
# The training tutorials (04-06): real data from MINIDL_DATA, or a synthetic stand-in in small mode
# ----------------------------------------------------------------------------------------------


def _tutorial_utils():
    sys.path.insert(0, str(TUTORIALS))
    try:
        import tutorial_utils
    finally:
        sys.path.remove(str(TUTORIALS))
    return tutorial_utils


def test_load_dataset_falls_back_only_in_small_mode(capsys):
    tu = _tutorial_utils()
    from minidl.data import DatasetNotFoundError

    calls = []

    def missing(download):
        calls.append(download)
        raise DatasetNotFoundError("MNIST: missing train-images-idx3-ubyte.gz. Download them by hand")

    data, real = tu.load_dataset("small", "MNIST", missing, lambda: "stand-in")
    assert (data, real) == ("stand-in", False) and calls == [False]      # small mode never downloads
    assert "SYNTHETIC" in capsys.readouterr().out
    with pytest.raises(DatasetNotFoundError):
        tu.load_dataset("full", "MNIST", missing, lambda: "stand-in")
    assert calls == [False, True]                                        # full mode may download
    assert tu.load_dataset("small", "MNIST", lambda download: "real", lambda: "stand-in") == ("real", True)


def test_synthetic_images_are_deterministic_and_learnable_in_shape():
    tu = _tutorial_utils()
    a = tu.SyntheticImages(50, (32, 32, 3), list("abcdefghij"), seed=3)
    b = tu.SyntheticImages(50, (32, 32, 3), list("abcdefghij"), seed=3)
    grey = tu.SyntheticImages(40, (28, 28), [str(k) for k in range(10)], seed=1)
    assert a.data.shape == (50, 32, 32, 3) and a.data.dtype.name == "uint8" and grey.data.shape == (40, 28, 28)
    assert (a.data == b.data).all() and (a.targets == b.targets).all()
    assert a.targets.min() >= 0 and a.targets.max() <= 9 and a.targets.dtype.name == "int64"
    # Same-class images are closer to each other than to other classes' (there is a signal to learn).
    flat = a.data.reshape(50, -1).astype(float)
    same = [abs(flat[i] - flat[j]).mean() for i in range(50) for j in range(i) if a.targets[i] == a.targets[j]]
    other = [abs(flat[i] - flat[j]).mean() for i in range(50) for j in range(i) if a.targets[i] != a.targets[j]]
    assert sum(same) / len(same) < 0.8 * sum(other) / len(other)


def test_synthetic_text_files_load_as_corpora(tmp_path):
    tu = _tutorial_utils()
    from minidl.data import CharCorpus, WordCorpus

    chars = CharCorpus(tu.write_synthetic_text(tmp_path / "chars", 5000))
    assert len(chars.text) == 5000 and ":" in chars.chars and chars.vocab_size < 60
    words = WordCorpus(tu.write_synthetic_ptb(tmp_path / "ptb", sentences=(200, 20, 20)))
    assert "<unk>" in words.word_to_id and "<eos>" in words.word_to_id and len(words.valid) > 100


TRAINING_SOURCES = [s for s in SOURCES if s.stem[:2] in ("04", "05", "06")]


@pytest.mark.parametrize("source", TRAINING_SOURCES, ids=lambda p: p.stem)
def test_training_notebook_runs_on_synthetic_data_without_the_datasets(source, small_mode, tmp_path, monkeypatch):
    """With a data root that holds nothing, small mode must still run, and say it used synthetic data."""
    monkeypatch.setenv("MINIDL_DATA", str(tmp_path / "empty"))
    path = TUTORIALS / f".test_synthetic_{source.stem}.ipynb"
    try:
        build.write_notebook(build.make_notebook(build.parse_percent(source.read_text()), source.stem), path)
        nb = run.execute_notebook(path, executor="builtin", timeout=120)
    finally:
        path.unlink(missing_ok=True)
    text = _text(nb)
    assert "SYNTHETIC" in text
    # ... and what it teaches holds on the stand-in: the models learn it (test figures well above chance).
    import re

    if source.stem.startswith("04"):
        accuracy = float(re.findall(r"test accuracy (\d+\.\d+)%", text)[-1])
        assert accuracy > 50, f"04 on synthetic data: test accuracy {accuracy}% (chance 10%)"
    elif source.stem.startswith("05"):
        accuracy = float(re.search(r"bn: loss .*? final test accuracy (\d+\.\d+)%", text).group(1))
        assert accuracy > 25, f"05 on synthetic data: batch-norm test accuracy {accuracy}% (chance 10%)"
    else:
        test_ppl, unigram = re.search(r"test perplexity (\d+\.?\d*) after .*?unigram baseline (\d+)", text).groups()
        assert float(test_ppl) < float(unigram), (test_ppl, unigram)
