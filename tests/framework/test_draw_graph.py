"""minidl.utils.draw_graph: the drawn graph is the tape (every Function backward will run, every leaf
that gets a gradient, the shapes on the edges), the SVG is well-formed with no Graphviz installed, and
misuse (no graph, a freed graph) is explained."""
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.autograd import function as autograd_function
from minidl.utils import draw_graph


def _cnn_loss():
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 3))
    loss = F.cross_entropy(model(minidl.randn(2, 1, 6, 6)), minidl.tensor(np.array([0, 2])))
    return model, loss


def test_the_graph_is_the_tape():
    model, loss = _cnn_loss()
    g = draw_graph(loss, params=model)
    functions = [n["label"][0] for n in g.nodes.values() if n["kind"] == "function"]
    order = [fn.name for fn in autograd_function._topological_order(loss.grad_fn)]
    assert sorted(functions) == sorted(order)           # every Function backward runs, and only those
    leaves = {n["label"][0] for n in g.nodes.values() if n["kind"] == "leaf"}
    assert leaves == {name for name, p in model.named_parameters()}
    edge_labels = {label for _, _, label in g.edges}
    assert "(2, 4, 6, 6) float32" in edge_labels and "(2, 144) float32" in edge_labels
    text = str(g)
    assert "Convolution" in text and "0.weight | (4, 1, 3, 3) float32" in text


def test_saved_tensors_and_kernels():
    model, loss = _cnn_loss()
    g = draw_graph(loss, params=model, show_saved=True, show_kernels=True)
    conv = next(n for n in g.nodes.values() if n["label"][0] == "Convolution")
    assert "saved x: (2, 1, 6, 6) float32" in conv["label"]
    assert any(line.startswith("convolution_backward_filter -> primitives/cpu/convolution.py") for line in conv["label"])
    assert any(line.startswith("algorithms: forward:") for line in conv["label"])
    bn = next(n for n in g.nodes.values() if n["label"][0] == "BatchNormTraining")
    assert "batch_norm_backward -> primitives/cpu/batch_norm.py" in bn["label"]


def test_svg_without_graphviz_is_well_formed(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)     # as on a machine without Graphviz
    model, loss = _cnn_loss()
    g = draw_graph(loss, params=model)
    root = ET.fromstring(g._repr_svg_())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "Convolution" in texts and "4.weight" in texts
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) == len(g.nodes)
    assert g.save(str(tmp_path / "g.svg")).endswith(".svg") and (tmp_path / "g.svg").read_text().startswith("<svg")
    dot = (tmp_path / "g.dot")
    g.save(str(dot))
    assert dot.read_text().startswith("digraph autograd {") and dot.read_text().count("->") == len(g.edges)
    with pytest.raises(ValueError, match=".svg or .dot"):
        g.save(str(tmp_path / "g.png"))


def test_misuse_is_explained():
    with pytest.raises(ValueError, match="does not require grad"):
        draw_graph(minidl.randn(3) * 2)
    with pytest.raises(TypeError, match="minidl Tensor"):
        draw_graph(np.ones(3))
    w = minidl.randn(3, requires_grad=True)
    z = (w * w).sum()
    z.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        draw_graph(z)
    leaf = draw_graph(w, params={"w": w})
    assert [n["label"][0] for n in leaf.nodes.values()] == ["w"]
