"""One primitive, one name (docs/DESIGN.md): every CUDA kernel in kernels/*.cu is launched by name from
its family's launcher in minidl/primitives/cuda/, and every kernel that computes a primitive has a NumPy
reference of the same name in minidl/primitives/cpu/. Checked statically (no GPU needed), so a
renamed kernel, launcher string or reference turns CI red.

Kernel names are read from the sources, including the ones stamped by macros (a `##`-pasted macro
parameter becomes `*`). A launcher "names" a kernel when one of its string constants or f-strings,
read as a pattern (each placeholder matches a word), matches the kernel's name in full, and the
pattern starts with at least the family's first word: `f"{family}_{kind}"` names nothing.
Variants of one primitive (layouts, tile widths, the 2x2 pooling fast path, the warp/block softmax)
share its reference: `reference_name` strips them, and says how, one rule per line."""
import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
CUDA = REPO / "minidl" / "primitives" / "cuda"
CPU = REPO / "minidl" / "primitives" / "cpu"

# kernel file -> its launcher modules and its reference module (when the names differ from the file's)
LAUNCHERS = {"gemm_tc": ("gemm",), "convolution_tc": ("convolution_tc", "convolution_fft"),
             "convolution": ("convolution", "convolution_im2col"), "attention_wgmma": ("attention",)}
REFERENCE = {"gemm_tc": "gemm", "gemm_wgmma": "gemm", "convolution_tc": "convolution",
             "convolution_wgmma": "convolution", "rnn_persistent": "rnn", "attention_wgmma": "attention"}

# Kernels that compute a piece of a primitive, not a primitive: no reference of their own. Each says why.
HELPER_KERNELS = {
    "convolution_tap_table": "precomputes per-tap offsets for implicit_precomp_gemm: an index table, not arithmetic",
    "convolution_bias_blend": "adds the bias and applies alpha/beta after a GEMM-based forward (the reference "
                              "does both inside convolution_forward)",
    "convolution_splitk_reduce": "sums the split-K partial products of a weight gradient",
    "convolution_tc_splitk_reduce_*": "sums the split-K partial products of the tensor-core weight gradient",
    "convolution_wgmma_shift_columns": "copies x once per filter column, shifted, for the channels-first TF32 wgrad "
                                       "(TMA boxes start 16-byte aligned): data movement",
    "convolution_winograd_filter_transform": "a stage of winograd (G g G^T); the reference does the three "
                                             "transforms inside _winograd_f2x2_3x3",
    "convolution_winograd_input_transform": "a stage of winograd (B^T d B), see above",
    "convolution_winograd_output_transform": "a stage of winograd (A^T m A), see above",
    "convolution_fft_products": "the per-frequency products of the FFT convolution (np.einsum inside "
                                "convolution_forward_fft & co.); the transforms are cuFFT's",
    "gemm_splitk_reduce": "sums the split-K partial products of a GEMM",
    "gemm_wgmma_transpose": "copies a float32 operand transposed (K-major) for TF32 wgmma: data movement",
    "batch_norm_stats_planes": "pass 1 of batch_norm_forward_training (partial sums, channel planes)",
    "batch_norm_stats_rows": "pass 1 of batch_norm_forward_training (partial sums, channels-last rows)",
    "batch_norm_finalize_stats": "mean, invstd and running statistics from the partial sums (pass 1's last block "
                                 "runs the same code; this kernel only in a capture without counters)",
    "batch_norm_apply": "pass 2 of batch_norm_forward_training (normalise and scale)",
    "batch_norm_inference_affine": "folds the running statistics into a scale and shift for inference",
    "batch_norm_grads_planes": "pass 1 of batch_norm_backward (partial sums of dy and dy*x_hat)",
    "batch_norm_grads_rows": "pass 1 of batch_norm_backward, channels-last rows",
    "batch_norm_finalize_grads": "dgamma, dbeta from the partial sums (likewise inside pass 1 where it can)",
    "batch_norm_backward_dx": "pass 2 of batch_norm_backward (dx)",
    "batch_norm_relu_apply": "pass 2 of batch_norm_relu_forward_training",
    "batch_norm_relu_grads_planes": "pass 1 of batch_norm_relu_backward",
    "batch_norm_relu_grads_rows": "pass 1 of batch_norm_relu_backward, channels-last rows",
    "batch_norm_relu_backward_dx": "pass 2 of batch_norm_relu_backward (dx)",
    "multi_tensor_increment_steps": "advances the per-parameter step counts of Adam/RMSprop on the device",
    "multi_tensor_l2norm_partial": "pass 1 of multi_tensor_l2norm",
    "multi_tensor_l2norm_finalize": "pass 2 of multi_tensor_l2norm (the norm and the clip coefficient)",
    "philox4x32_10_kernel": "the raw Philox stream (cpu/dropout.py: philox4x32), for the RNG tests",
    "attention_delta": "pass 1 of attention_backward: Delta = rowsum(dO * O) per query (the reference forms it "
                       "inside attention_backward)",
    "attention_dq_finish": "scales and rounds attention_backward's fp32 dQ sums: data movement",
    "convolution_backward_bias_finish": "pass 2 of convolution_backward_bias_nhwc: adds its per-chunk column sums "
                                        "in order and writes db in the data's dtype",
    "cross_entropy_reduce": "pass 2 of cross_entropy_forward: the per-row losses and weights summed in one block",
    "layer_norm_backward_data": "dx of layer_norm_backward (the reference computes dx, dweight and dbias in one "
                                "function; the kernel splits them)",
    "layer_norm_backward_params": "pass 1 of layer_norm_backward's dweight/dbias (per-chunk column sums)",
    "layer_norm_params_finish": "pass 2 of layer_norm_backward's dweight/dbias (the chunks added up)",
}

# variant suffix -> what the reference is called (applied in order; the first that matches wins)
VARIANTS = [
    (r"^(convolution_\w+?_direct)_small_c_(nchw|nhwc)(_kb\*_ct\*)?$", r"\1"),   # few input channels
    (r"^(convolution_\w+?_implicit(_precomp)?_gemm)_(nchw|nhwc)(_t)?_bn(\*|\d+)$", r"\1"),  # layout, tile
    (r"^convolution_(forward|backward_data|backward_filter)_tc_\*_(t_)?bn(\*|\d+)$",
     r"convolution_\1_implicit_gemm_tc"),                                    # tensor cores: kind, tile
    (r"^(pooling_\w+)_k2s2$", r"\1"),                                        # the 2x2 / stride-2 fast path
    (r"^(softmax_\w+)_(warp_\*|block|strided)$", r"\1"),                     # one warp / block per row
    (r"^(cross_entropy_forward)_(warp|strided)$", r"\1"),                     # one warp / thread per row
    (r"^(cross_entropy_(forward|backward))_block$", r"\1"),                    # one block per row (many classes)
    (r"^gemm_(nn|nt|tn|tt)_bn\d+$", "gemm"),                                 # transposes, tile width
    (r"^gemm_tc$", "gemm"),                                                  # template: kind, tile, transposes
    (r"^gemm_wgmma$", "gemm"),                                               # Hopper's wgmma: kind, tile, transposes
    (r"^convolution_(forward|backward_data|backward_filter)_wgmma(_nchw)?$",
     r"convolution_\1_implicit_gemm_tc"),                                    # on Hopper's wgmma (TF32 wgrad: NCHW)
    (r"^(rnn|lstm|gru)_persistent_(forward|backward)$", r"rnn_\2"),          # a layer's whole step loop, one launch
    (r"^attention_(forward|backward)_wgmma$", r"attention_\1"),              # Hopper's wgmma: kind, head dim, flags
    (r"^(attention_(forward|backward))_tf32$", r"\1"),                       # float32 data on TF32 mma (3x or 1x)
    (r"^convolution_backward_bias_nhwc$", "convolution_backward_bias"),     # channels-last: coalesced column sums
    (r"^(dropout_(forward|backward))_half$", r"\1"),                         # float16 / bfloat16 data
    (r"^(activation_(forward|backward))_half$", r"\1"),                      # float16 / bfloat16 data
    (r"^layout_transform_pairs$", "layout_transform"),                      # 16-bit data moved as 4-byte pairs
]


def kernel_symbols():
    """{kernel file stem: set of kernel names}; a macro parameter pasted into a name shows as '*'."""
    out = {}
    for path in sorted(KERNELS.glob("*.cu")):
        text = re.sub(r"\\\n", " ", path.read_text())   # join macro continuation lines
        names = set(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?([A-Za-z_][\w#]*)\s*[(<]", text))
        names |= set(re.findall(r"template\s+__global__\s+void\s+(\w+)\s*<", text))
        # macros whose kernel is named by their first parameter: the names are the arguments of their uses
        for macro, first in re.findall(r"#define\s+(\w+)\(\s*(\w+)[^)]*\)[^\n]*__global__\s+void\s+"
                                       r"(?:__launch_bounds__\([^)]*\)\s*)?\2\s*\(", text):
            names.discard(first)
            names |= {a for a in re.findall(r"(?<!#define )\b" + macro + r"\(\s*([\w#]+)", text) if a != first}
        out[path.stem] = {re.sub(r"##([A-Za-z0-9]\w*)", "*", n).replace("##", "") for n in names}
    return out


def _patterns(node):
    """Regexes a string-valued expression can produce (None: not a string we can read)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [re.escape(node.value).replace(r"\{kind\}", r"\w+").replace("%d", r"\d+")]
    if isinstance(node, ast.JoinedStr):
        pats = [""]
        for v in node.values:
            if isinstance(v, ast.Constant):
                alts = [re.escape(v.value)]
            else:
                inner = _patterns(v.value) if isinstance(v.value, (ast.IfExp, ast.Constant)) else None
                alts = inner or [r"\w+"]
            pats = [p + a for p in pats for a in alts]
        return pats
    if isinstance(node, ast.IfExp):
        a, b = _patterns(node.body), _patterns(node.orelse)
        return a + b if a and b else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _patterns(node.left), _patterns(node.right)
        return [x + y for x in a for y in b] if a and b else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _patterns(node.left)
    return None


def launcher_patterns(family):
    pats = []
    for name in LAUNCHERS.get(family, (family,)):
        for node in ast.walk(ast.parse((CUDA / f"{name}.py").read_text())):
            for p in _patterns(node) or []:
                prefix = re.split(r"\\w\+|\\d\+", p, maxsplit=1)[0]
                if prefix == p or len(prefix) >= len(family.split("_")[0]) + 1:   # a literal name, or a long prefix
                    pats.append(p)
    return pats


def reference_name(symbol):
    for pattern, replacement in VARIANTS:
        if re.match(pattern, symbol):
            return re.sub(pattern, replacement, symbol)
    return symbol


SYMBOLS = kernel_symbols()
CASES = sorted((family, s) for family, names in SYMBOLS.items() for s in names)


def test_kernels_are_found():
    assert len(CASES) > 60 and {"convolution", "gemm", "rnn", "softmax", "pooling"} <= set(SYMBOLS)
    assert "convolution_forward_implicit_gemm_nhwc_bn*" in SYMBOLS["convolution"]   # stamped by a macro
    assert "gemm_tc" in SYMBOLS["gemm_tc"]                                           # a template


@pytest.mark.parametrize("family,symbol", CASES)
def test_every_kernel_is_launched_by_name(family, symbol):
    instance = symbol.replace("*", "7")
    assert any(re.fullmatch(p, instance) for p in launcher_patterns(family)), (
        f"kernels/{family}.cu: {symbol} is named by no string of its launcher "
        f"({', '.join(f'cuda/{n}.py' for n in LAUNCHERS.get(family, (family,)))})")


@pytest.mark.parametrize("family,symbol", CASES)
def test_every_primitive_kernel_has_a_reference_of_its_name(family, symbol):
    if symbol in HELPER_KERNELS:
        return
    name = reference_name(symbol)
    module = REFERENCE.get(family, family)
    defined = set(re.findall(r"^def (\w+)\(", (CPU / f"{module}.py").read_text(), re.M))
    assert name in defined, (f"kernels/{family}.cu: {symbol} computes {name}, which cpu/{module}.py does not "
                             "define (or list it in HELPER_KERNELS with why it has no reference of its own)")


def test_helper_list_names_existing_kernels():
    every = {s for names in SYMBOLS.values() for s in names}
    assert set(HELPER_KERNELS) <= every, set(HELPER_KERNELS) - every


def test_cpu_and_cuda_modules_do_not_import_the_public_module_above_them():
    """cpu/<family>.py and cuda/<family>.py are below minidl/primitives/<family>.py, which imports them."""
    public = {p.stem for p in (REPO / "minidl" / "primitives").glob("*.py") if not p.stem.startswith("_")}
    bad = []
    for folder in (CPU, CUDA):
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module in public:
                    bad.append(f"{path.relative_to(REPO)} imports primitives.{node.module}")
                if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module is None:
                    bad += [f"{path.relative_to(REPO)} imports primitives.{a.name}" for a in node.names
                            if a.name in public]
    assert bad == []


def _algorithm_tables(path):
    """{table name: {algorithm: function name}} of the FORWARD / BACKWARD_DATA / BACKWARD_FILTER dict
    literals in a backend module (read with ast: the CUDA module imports CuPy)."""
    tables = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", "")
            if name in ("FORWARD", "BACKWARD_DATA", "BACKWARD_FILTER"):
                tables[name] = {k.value: v.id for k, v in zip(node.value.keys, node.value.values)}
    return tables


def test_convolution_launchers_are_per_algorithm_functions_named_as_the_reference():
    """cuda/convolution.py dispatches through one function per (direction, algorithm), named
    convolution_<direction>_<algorithm> as in cpu/convolution.py (where both backends have the algorithm)."""
    cuda = _algorithm_tables(REPO / "minidl" / "primitives" / "cuda" / "convolution.py")
    cpu = _algorithm_tables(REPO / "minidl" / "primitives" / "cpu" / "convolution.py")
    assert set(cuda) == set(cpu) == {"FORWARD", "BACKWARD_DATA", "BACKWARD_FILTER"}
    for table, direction in (("FORWARD", "forward"), ("BACKWARD_DATA", "backward_data"),
                             ("BACKWARD_FILTER", "backward_filter")):
        for algo, fn in cuda[table].items():
            assert fn == f"convolution_{direction}_{algo}", (table, algo, fn)
            if algo in cpu[table]:
                assert cpu[table][algo] == fn, (table, algo)


def test_conv_shape_fields_agree():
    """kernels/convolution_wgmma.cu's `struct ConvShape` and the launcher's SHAPE_FIELDS list the same int
    fields in the same order (the launcher packs them into a NumPy record the kernel receives by value)."""
    text = (KERNELS / "convolution_wgmma.cu").read_text()
    body = re.search(r"struct ConvShape \{(.*?)\};", text, re.S).group(1)
    kernel_fields = []
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            assert decl.startswith("int ") and decl.endswith(";"), decl
            kernel_fields += [f.strip() for f in decl[4:-1].split(",")]
    tree = ast.parse((CUDA / "convolution_wgmma.py").read_text())
    launcher_fields = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                           if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SHAPE_FIELDS")
    assert list(launcher_fields) == kernel_fields


def test_a_slow_compile_is_announced_and_a_fast_one_is_not():
    """run_with_compile_notice (minidl/primitives/cuda/_compile.py uses it around NVRTC): a compile that
    takes longer than the threshold is said before it ends and timed after; a cache hit says nothing."""
    import io
    import time

    from minidl.primitives import _common

    out = io.StringIO()
    assert _common.run_with_compile_notice("kernels/demo.cu (-DT=half)", lambda: time.sleep(0.3) or 7,
                                           after_s=0.05, stream=out) == 7
    text = out.getvalue()
    assert "compiling kernels/demo.cu (-DT=half)" in text and "compiled kernels/demo.cu (-DT=half) in 0." in text
    quiet = io.StringIO()
    _common.run_with_compile_notice("kernels/demo.cu", lambda: None, after_s=0.5, stream=quiet)
    time.sleep(0.6)
    assert quiet.getvalue() == ""
