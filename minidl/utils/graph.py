"""Draw the autograd graph behind a tensor: what backward() will walk (micrograd's draw_dot, torchviz's make_dot).

    g = minidl.utils.draw_graph(loss, params=model)      # in a notebook the cell shows the picture
    g = minidl.utils.draw_graph(loss, show_saved=True, show_kernels=True)
    g.save("graph.svg")   # or .dot; print(g) gives the same graph as text

The graph read here is the tape itself (minidl/autograd/function.py):
- every non-leaf tensor points to the Function that made it (`tensor._ctx`, torch's `grad_fn`);
- every Function holds its inputs (`fn.inputs`), so following them from the output walks back to the leaves.

Nodes: the output tensor (green), each Function (grey: its name, e.g. `Convolution`), each leaf that
requires grad (blue: a parameter shows its name when `params` is given, a model or a dict). An edge
carries the tensor that flows along it: its shape and dtype. Options:
- `show_saved`: the arrays each Function keeps for backward (the memory that training holds between
  forward and backward, and the reason for activation checkpointing);
- `show_kernels`: which primitives each Function calls (read from its forward and backward source, as
  `P.batch_norm_forward_training(...)`), on which device, so where the code is: the NumPy reference in
  `minidl/primitives/cpu/<family>.py` or the CUDA kernel in `kernels/<family>.cu`; a convolution also
  shows the algorithm its plan chose for each direction.

Rendering: with the `graphviz` Python package and its `dot` program installed, an SVG laid out by dot;
otherwise a small SVG laid out here (the Functions in rows by their distance from the output), so
the picture shows in any notebook with no extra install.
"""
from __future__ import annotations

import html
import inspect
import re
import shutil

import numpy as np

_PRIMITIVE_CALL = re.compile(r"\bP\.([a-z][a-z0-9_]*)\(")
_FAMILIES = ("convolution", "batch_norm", "layer_norm", "pooling", "activation", "softmax", "lrn", "dropout", "rnn",
             "gemm", "multi_tensor")
_NO_KERNEL_YET = ("layer_norm",)   # its CUDA path runs the reference's array code on CuPy


def _shape(shape, dtype) -> str:
    return f"{tuple(int(s) for s in shape)} {np.dtype(dtype).name}"


def _param_names(params) -> dict:
    if params is None:
        return {}
    if hasattr(params, "named_parameters"):
        params = dict(params.named_parameters())
    return {id(t): name for name, t in dict(params).items()}


def _saved(fn) -> list[str]:
    """The arrays a Function keeps for backward (its attributes holding arrays), with their shapes."""
    out = []
    for key, value in sorted(vars(fn).items()):
        if key.startswith("_") or key in ("inputs", "needs_input_grad"):
            continue
        if isinstance(value, np.ndarray) or type(value).__module__.startswith("cupy"):   # arrays, 0-d too
            out.append(f"{key}: {_shape(value.shape, value.dtype)}")
    return out


def _kernels(fn, device: str) -> list[str]:
    """The primitives fn's forward and backward call, where their code lives on `device`, and a
    convolution plan's chosen algorithms."""
    names = []
    for method in ("forward", "backward"):
        try:
            source = inspect.getsource(getattr(type(fn), method))
        except (OSError, TypeError):
            continue
        for name in _PRIMITIVE_CALL.findall(source):
            if name not in names and not name[0].isupper():
                names.append(name)
    lines = []
    plan = getattr(fn, "plan", None)
    if plan is not None and hasattr(plan, "algos"):
        names = names or ["convolution_forward", "convolution_backward_data", "convolution_backward_filter"]
        chosen = ", ".join(f"{d}: {a}" for d, a in plan.algos.items())
        if chosen:
            lines.append(f"algorithms: {chosen}")
    for name in names:
        family = next((f for f in _FAMILIES if name.startswith(f)), None)
        if family is None:
            where = ""
        elif device != "cuda":
            where = f" -> primitives/cpu/{family}.py"
        elif family in _NO_KERNEL_YET:
            where = f" -> primitives/cuda/{family}.py (CuPy array code, no kernel of ours yet)"
        else:
            where = f" -> kernels/{family}.cu"
        lines.append(f"{name}{where}")
    return lines


class Graph:
    """The nodes and edges of an autograd graph, and their renderings (dot source, SVG, text)."""

    def __init__(self, nodes, edges, title=""):
        self.nodes = nodes    # id -> {"kind": "output"|"function"|"leaf", "label": [lines]}
        self.edges = edges    # (from_id, to_id, label): from the input side towards the output
        self.title = title

    # -- text -------------------------------------------------------------------------------
    def __str__(self):
        lines = [self.title] if self.title else []
        for nid, node in self.nodes.items():
            inputs = [f"{self.nodes[a]['label'][0]} [{label}]" for a, b, label in self.edges if b == nid]
            lines.append(f"{node['kind']:8} {' | '.join(node['label'])}"
                         + (f"  <- {', '.join(inputs)}" if inputs else ""))
        return "\n".join(lines)

    __repr__ = __str__

    # -- dot ----------------------------------------------------------------------------------
    def source(self) -> str:
        """The graph in Graphviz's dot language."""
        colors = {"output": "#b7e1a1", "function": "#e0e0e0", "leaf": "#a9cce3"}
        out = ["digraph autograd {", '  rankdir=BT; node [fontname="Helvetica", fontsize=10, style=filled];',
               '  edge [fontname="Helvetica", fontsize=9];']
        for nid, node in self.nodes.items():
            label = "\\n".join(line.replace('"', "'") for line in node["label"])
            shape = "box" if node["kind"] != "function" else "box, style=\"rounded,filled\""
            out.append(f'  n{nid} [label="{label}", shape={shape}, fillcolor="{colors[node["kind"]]}"];')
        for a, b, label in self.edges:
            out.append(f'  n{a} -> n{b} [label="{label}"];')
        out.append("}")
        return "\n".join(out)

    # -- SVG ----------------------------------------------------------------------------------
    def svg(self) -> str:
        """SVG text: laid out by Graphviz's dot when it is installed, else by _layout_svg."""
        if shutil.which("dot"):
            try:
                import graphviz

                return graphviz.Source(self.source()).pipe(format="svg").decode()
            except Exception:   # a broken graphviz install: fall back, the picture still shows
                pass
        return self._layout_svg()

    def _layout_svg(self) -> str:
        """A layered layout without Graphviz: the output at the top, each node one row below the
        farthest node it feeds (its longest path to the output), nodes of a row side by side."""
        consumers = {}
        for a, b, _ in self.edges:
            consumers.setdefault(a, []).append(b)
        depth = {}

        def level(nid):
            if nid not in depth:
                depth[nid] = 0   # guards against a cycle (there is none on a tape)
                depth[nid] = max((level(c) + 1 for c in consumers.get(nid, ())), default=0)
            return depth[nid]

        for nid in self.nodes:
            level(nid)
        rows = {}
        for nid in self.nodes:
            rows.setdefault(depth[nid], []).append(nid)
        char_w, line_h, pad, gap_x, gap_y = 6.2, 13, 8, 24, 46
        size = {nid: (max(len(s) for s in n["label"]) * char_w + 2 * pad, len(n["label"]) * line_h + 2 * pad)
                for nid, n in self.nodes.items()}
        width = max(sum(size[n][0] for n in row) + gap_x * (len(row) + 1) for row in rows.values())
        pos, y = {}, 30.0 if self.title else 10.0
        for d in sorted(rows):
            row = rows[d]
            x = (width - (sum(size[n][0] for n in row) + gap_x * (len(row) - 1))) / 2
            for nid in row:
                pos[nid] = (x, y)
                x += size[nid][0] + gap_x
            y += max(size[n][1] for n in row) + gap_y
        height = y
        colors = {"output": "#b7e1a1", "function": "#e0e0e0", "leaf": "#a9cce3"}
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
                 f'font-family="Helvetica, Arial, sans-serif" font-size="10">',
                 '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
                 'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
        if self.title:
            parts.append(f'<text x="10" y="18" font-size="12">{html.escape(self.title)}</text>')
        for a, b, label in self.edges:   # from the input (below) up to its consumer
            (xa, ya), (xb, yb) = pos[a], pos[b]
            x1, y1 = xa + size[a][0] / 2, ya
            x2, y2 = xb + size[b][0] / 2, yb + size[b][1]
            parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555" '
                         'marker-end="url(#arrow)"/>')
            parts.append(f'<text x="{(x1 + x2) / 2 + 3:.1f}" y="{(y1 + y2) / 2:.1f}" fill="#444" font-size="9">'
                         f'{html.escape(label)}</text>')
        for nid, node in self.nodes.items():
            (x, y0), (w, h) = pos[nid], size[nid]
            rx = 8 if node["kind"] == "function" else 2
            parts.append(f'<rect x="{x:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
                         f'fill="{colors[node["kind"]]}" stroke="#333"/>')
            for i, line in enumerate(node["label"]):
                weight = ' font-weight="bold"' if i == 0 else ""
                parts.append(f'<text x="{x + pad:.1f}" y="{y0 + pad + (i + 0.8) * line_h:.1f}"{weight}>'
                             f'{html.escape(line)}</text>')
        parts.append("</svg>")
        return "\n".join(parts)

    def _repr_svg_(self):
        return self.svg()

    def _repr_html_(self):   # front ends (and tutorials/run.py's builtin executor) that record HTML
        return self.svg()

    def save(self, path: str) -> str:
        """Write the graph as .svg or .dot (by the file's extension); returns the path."""
        if str(path).endswith(".dot") or str(path).endswith(".gv"):
            text = self.source()
        elif str(path).endswith(".svg"):
            text = self.svg()
        else:
            raise ValueError(f"draw_graph(...).save: write .svg or .dot, got {path!r}")
        with open(path, "w") as f:
            f.write(text)
        return path


def draw_graph(tensor, params=None, show_saved=False, show_kernels=False, max_nodes=500) -> Graph:
    """The autograd graph that ends in `tensor` (usually a loss), as a Graph that a notebook shows as SVG.

    params: a Module or a {name: tensor} dict, so that parameters are drawn with their names.
    show_saved / show_kernels: see the module's docstring. max_nodes: a guard for very large graphs.
    """
    from ..autograd.tensor import Tensor

    if not isinstance(tensor, Tensor):
        raise TypeError(f"draw_graph: expected a minidl Tensor, got {type(tensor).__name__}")
    if not tensor.requires_grad:
        raise ValueError(f"draw_graph: this tensor (shape {tuple(tensor.shape)}) does not require grad, so no "
                         "graph was recorded; was it computed under no_grad(), or from tensors without "
                         "requires_grad=True?")
    names = _param_names(params)
    device = "cuda" if tensor.is_cuda else "cpu"
    nodes, edges, ids = {}, [], {}

    def node_id(obj):
        return ids.setdefault(id(obj), len(ids))

    out_id = node_id(tensor)
    nodes[out_id] = {"kind": "output", "label": ["output", _shape(tensor.shape, tensor.dtype)]}
    if tensor._ctx is None:   # a leaf: nothing was computed
        nodes[out_id]["label"][0] = names.get(id(tensor), "leaf (nothing recorded)")
        return Graph(nodes, edges)
    fn = tensor._ctx
    if getattr(fn, "_released", False):
        raise RuntimeError("draw_graph: backward() has already run through this graph and freed it; draw it "
                           "before backward(), or call backward(retain_graph=True)")
    edges.append((node_id(fn), out_id, _shape(tensor.shape, tensor.dtype)))
    stack, seen = [fn], set()
    while stack:
        fn = stack.pop()
        fid = node_id(fn)
        if fid in seen:
            continue
        seen.add(fid)
        if len(seen) > max_nodes:
            raise ValueError(f"draw_graph: more than {max_nodes} Functions; pass max_nodes= to draw it anyway")
        label = [fn.name]
        if show_saved:
            label += [f"saved {s}" for s in _saved(fn)]
        if show_kernels:
            label += _kernels(fn, device)
        nodes[fid] = {"kind": "function", "label": label}
        for t in fn.inputs:
            if t is None or not t.requires_grad:
                continue
            shape = _shape(t.shape, t.dtype)
            if t._ctx is None:   # a leaf that requires grad: a parameter, or an input being optimised
                lid = node_id(t)
                if lid not in nodes:
                    nodes[lid] = {"kind": "leaf", "label": [names.get(id(t), "leaf"), shape]}
                edges.append((lid, fid, ""))
            else:
                edges.append((node_id(t._ctx), fid, shape))
                stack.append(t._ctx)
    title = f"autograd graph: {len(seen)} Functions, {sum(n['kind'] == 'leaf' for n in nodes.values())} leaves"
    return Graph(nodes, edges, title)
