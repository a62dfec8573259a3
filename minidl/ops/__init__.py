"""minidl.ops: every operation on tensors, grouped by what it computes.

    elementwise  + - * / ** %, comparisons, exp/log/sqrt/abs/clamp/round/sin/cos, where (their unary Functions in
                 unary.py)
    mathops      the long tail of elementwise math (tan, erf, atan2, xlogy, ...) and torch's aliases
    logical      comparisons (== < ..., equal, isclose), logical_and/or/xor/not, bitwise ops, isnan, isin, ...
    reductions   sum, mean, var/std, max/min, amax/amin, argmax, logsumexp, norm, prod, cumsum, ...
    sorting      sort, topk, kthvalue, median, mode, unique, searchsorted
    statistics   quantile, nanquantile, nanmedian, cov, corrcoef, trapezoid (composed of the others)
    shape        reshape/view, squeeze/unsqueeze, permute/transpose, expand, repeat, flip, roll, tril
    joining      cat, stack, split, chunk, unbind, hstack/vstack
    indexing     t[key], t[key] = v, gather, index_select, masked_fill, scatter, take
    linalg       a @ b (the one GEMM route of the tensor ops), mm/bmm/mv/dot, einsum, outer, addmm, diagonals
    conversion   to/cpu/cuda, type/float/half, contiguous/clone and memory formats, new_zeros, ...
    complexops   complex64/128 for rotary embeddings: polar, complex, view_as_complex, view_as_real, conj
    inplace      x += y, add_, mul_, clamp_, fill_, copy_, zero_, scatter_, unsqueeze_, ...
    activation   relu, sigmoid, tanh, softmax, log_softmax (Tensor methods; nn.functional has the rest)
    creation     tensor, zeros, ones, arange, randn, ... (the factories)
    sparse       sparse COO tensors: sparse_coo_tensor, to_sparse / to_dense, the sparse-dense product

Each family file holds its Functions (forward and backward side by side, on NumPy or CuPy arrays) and
their function forms. The autograd core (minidl/autograd: Tensor's storage, grad, version counter,
backward; Function and the tape) knows none of them: the TABLE below binds each function as a Tensor
method ("m"), as minidl.<name> ("f"), or both ("mf"); "p" makes the method a property (t.real). A method's function takes the tensor as `self`.
Where the method's name differs from the function's (Tensor.float is conversion.as_float, so that the
module does not hide Python's float), the row says "name=function".
"""
from __future__ import annotations

from . import (
    activation, complexops, conversion, creation, elementwise, indexing, inplace, joining, linalg, logical, mathops,
    reductions, shape, sorting, sparse, special_fns, statistics,
)
from ._checks import check_float_tensor, check_tensor  # noqa: F401  (for the layers above: nn, ...)
from ._dims import normalize_dim, normalize_dims  # noqa: F401
from ._promotion import can_cast, promote_types, result_type  # noqa: F401
from .conversion import (  # noqa: F401
    channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format,
)
from .creation import tensor, zeros  # noqa: F401
from .elementwise import where  # noqa: F401
from .inplace import write_out
from .joining import cat, split, stack  # noqa: F401
from .linalg import matmul  # noqa: F401

TABLE = (
    (elementwise, "m", "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __pow__ __rpow__ "
                       "__neg__ __pos__ __floordiv__ __mod__ __rfloordiv__ __rmod__ __abs__ where=tensor_where clip=clamp"),
    (elementwise, "mf", "add sub mul div pow float_power neg remainder square lerp abs exp log log1p sqrt rsqrt sign clamp maximum "
                        "minimum round floor ceil trunc fix=trunc sin cos"),
    (elementwise, "f", "where clip=clamp"),
    (mathops, "mf", "tan sinh cosh asin acos atan asinh acosh atanh arcsin arccos arctan arcsinh arccosh arctanh exp2 "
                    "expm1 log2 log10 reciprocal sinc deg2rad rad2deg frac logit erf erfc erfinv lgamma atan2 arctan2 hypot "
                    "logaddexp logaddexp2 xlogy fmod copysign multiply divide true_divide subtract negative positive "
                    "absolute sgn greater greater_equal less less_equal not_equal floor_divide fmax fmin clamp_min "
                    "clamp_max nan_to_num addcmul addcdiv"),
    (logical, "m", "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __invert__ __and__ __or__ __xor__ __rand__=__and__ "
                   "__ror__=__or__ __rxor__=__xor__ __lshift__ __rshift__ __rlshift__ __rrshift__"),
    (logical, "mf", "eq ne lt le gt ge isnan isfinite equal isclose allclose "
                    "logical_and logical_or logical_xor logical_not bitwise_and bitwise_or bitwise_not bitwise_xor "
                    "bitwise_left_shift bitwise_right_shift isinf isposinf "
                    "isneginf signbit heaviside"),
    (logical, "f", "isin"),
    (reductions, "mf", "sum mean var std max min argmax argmin amax amin aminmax logsumexp norm any all prod nansum "
                       "nanmean count_nonzero cumsum cumprod cummax cummin logcumsumexp"),
    (reductions, "f", "var_mean std_mean"),
    (sorting, "mf", "sort argsort msort topk kthvalue median mode unique unique_consecutive bincount histc"),
    (sorting, "f", "searchsorted bucketize"),
    (statistics, "mf", "quantile nanquantile nanmedian cov corrcoef"),
    (statistics, "f", "trapezoid cumulative_trapezoid"),
    (shape, "m", "view view_as expand expand_as repeat reshape_as unfold sum_to_size"),
    (shape, "mf", "reshape flatten unflatten ravel squeeze unsqueeze permute transpose t movedim moveaxis swapaxes "
                  "swapdims broadcast_to tile repeat_interleave flip fliplr flipud roll rot90 tril triu diff as_strided"),
    (shape, "f", "broadcast_shapes broadcast_tensors"),
    (joining, "mf", "split chunk unbind tensor_split hsplit vsplit dsplit"),
    (joining, "f", "cat concat concatenate stack hstack vstack dstack column_stack atleast_1d atleast_2d atleast_3d "
                   "cartesian_prod block_diag"),
    (indexing, "m", "__getitem__ __setitem__"),
    (indexing, "mf", "index_fill gather index_select masked_fill masked_select narrow narrow_copy nonzero argwhere scatter scatter_add "
                     "scatter_reduce index_reduce "
                     "index_add index_copy index_put masked_scatter select take take_along_dim"),
    (linalg, "m", "__matmul__=matmul __rmatmul__=rmatmul"),
    (linalg, "mf", "matmul mm bmm mv dot inner vdot outer ger tensordot kron cross addmm addmv baddbmm addbmm "
                   "diagonal diag trace"),
    (linalg, "f", "einsum cdist"),
    (linalg, "mf", "diag_embed"),
    (conversion, "m", "to cpu cuda type type_as float=as_float double=as_double half=as_half bfloat16=as_bfloat16 "
                      "long=as_long int=as_int bool=as_bool byte=as_byte char=as_char short=as_short contiguous is_contiguous stride new_zeros new_ones "
                      "new_empty new_full new_tensor pin_memory is_pinned data_ptr storage_offset"),
    (conversion, "mf", "clone is_complex is_nonzero isreal"),
    (conversion, "m", "new untyped_storage storage"),
    (joining, "mf", "select_scatter slice_scatter diagonal_scatter split_with_sizes unsafe_chunk unsafe_split"),
    (special_fns, "mf", "igamma igammac"),
    (elementwise, "mf", "rsub"),
    (complexops, "mf", "conj_physical"),
    (creation, "f", "scalar_tensor"),
    (indexing, "f", "unravel_index"),
    (joining, "f", "row_stack=vstack"),
    (conversion, "mf", "is_same_size is_conj is_neg resolve_conj resolve_neg"),
    (conversion, "f", "typename"),
    (conversion, "m", "get_device is_signed share_memory_ is_shared apply_ map_ resize_ resize_as_ new_empty_strided "
                      "record_stream"),
    (conversion, "p", "is_cpu is_xpu=not_this_device is_mps=not_this_device is_ipu=not_this_device is_hpu=not_this_device "
                      "is_xla=not_this_device is_mkldnn=not_this_device is_quantized=not_this_device "
                      "is_vulkan=not_this_device is_mtia=not_this_device is_maia=not_this_device"),
    (mathops, "mf", "gcd lcm ldexp renorm digamma mvlgamma frexp i0 nextafter"),
    (mathops, "f", "polygamma"),
    (mathops, "m", "polygamma=tensor_polygamma"),
    (complexops, "f", "view_as_complex view_as_real polar complex"),
    (complexops, "mf", "conj angle"),
    (complexops, "pf", "real imag"),
    (conversion, "f", "detach is_tensor is_floating_point"),
    (inplace, "m", "__iadd__ __isub__ __imul__ __itruediv__ __ipow__ add_ sub_ mul_ div_ pow_ neg_ exp_ log_ sqrt_ "
                   "abs_ relu_ sigmoid_ tanh_ addcmul_ addcdiv_ lerp_ masked_fill_ clamp_ clip_=clamp_ fill_ zero_ "
                   "copy_ uniform_ normal_ bernoulli_ exponential_ random_ erfinv_ scatter_ scatter_add_ scatter_reduce_ "
                   "index_add_ index_reduce_ "
                   "index_fill_ index_copy_ index_put_ masked_scatter_ "
                   "nan_to_num_ unsqueeze_ squeeze_ t_ tril_ triu_ fill_diagonal_ cauchy_ log_normal_ geometric_ "
                   "transpose_ swapaxes_=transpose_ swapdims_=transpose_ sin_ cos_ tan_ sinh_ cosh_ asin_ acos_ atan_ log2_ log10_ floor_ ceil_ trunc_ frac_ "
                   "sign_ round_ square_ reciprocal_ rsqrt_ log1p_ expm1_ erf_ erfc_ logit_ atan2_ hypot_ remainder_ "
                   "fmod_ floor_divide_ clamp_min_ clamp_max_ copysign_ xlogy_ logical_not_ addmm_ baddbmm_ addmv_ "
                   "addbmm_ " + " ".join(f"{m}_" for m in inplace.DERIVED_INPLACE)),
    # torch's top-level in-place functions (torch.sigmoid_(x) is x.sigmoid_())
    (inplace, "f", "abs_ sigmoid_ tanh_ exp_ log_ sqrt_ neg_ clamp_ clip_=clamp_ fill_ zero_ nan_to_num_ sin_ cos_ tan_ "
                   "sinh_ cosh_ asin_ acos_ atan_ log2_ log10_ floor_ ceil_ trunc_ frac_ round_ square_ reciprocal_ "
                   "rsqrt_ log1p_ expm1_ erf_ erfc_ logit_ clamp_min_ clamp_max_ xlogy_ addmv_ lcm_ gcd_ ldexp_ sinc_ "
                   "i0_ deg2rad_ rad2deg_ fix_ exp2_ arccos_ arccosh_ arcsin_ arcsinh_ arctan_ arctanh_ acosh_ asinh_ "
                   "atanh_ negative_"),
    (activation, "mf", "relu sigmoid tanh softmax log_softmax"),
    (sparse, "m", "to_sparse to_dense"),
    (sparse, "p", "is_sparse layout"),
    (sparse, "f", "sparse_coo_tensor spmm"),
    (creation, "m", "bernoulli multinomial"),
    (creation, "f", "tensor as_tensor asarray empty_strided from_numpy frombuffer zeros ones full empty zeros_like ones_like full_like empty_like arange "
                    "linspace eye rand randn randint randperm rand_like randn_like randint_like normal bernoulli "
                    "multinomial tril_indices triu_indices meshgrid hann_window hamming_window blackman_window "
                    "bartlett_window kaiser_window logspace range=torch_range"),
    (joining, "f", "combinations"),
    (linalg, "mf", "diagflat dist addr adjoint"),
    (linalg, "f", "vander"),
    (statistics, "mf", "histogram"),
    (statistics, "f", "trapz=trapezoid"),   # (torch.trapz: trapezoid's older name)
    (statistics, "f", "gradient"),
)


def _rows():
    """(family, binding, name, function) for every entry of TABLE."""
    for family, binding, names in TABLE:
        for entry in names.split():
            name, _, attr = entry.partition("=")
            yield family, binding, name, getattr(family, attr or name)


def _function_form(fn, name):
    """minidl.<name>(input, ..., out=None): the method's function, with torch's out= argument."""
    def function(input, *args, out=None, **kwargs):
        result = fn(input, *args, **kwargs)
        return result if out is None else write_out(out, result, name)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = fn.__doc__ or f"minidl.{name}(t, ...) is t.{name}(...)."
    function.__wrapped__ = fn
    return function


METHODS = {}     # Tensor.<name>
FUNCTIONS = {}   # minidl.<name>
for _family, _binding, _name, _fn in _rows():
    if "m" in _binding:
        METHODS[_name] = _fn
    if "p" in _binding:  # a property: t.real
        METHODS[_name] = property(_fn)
    if "f" in _binding:
        FUNCTIONS[_name] = _function_form(_fn, _name) if _binding == "mf" else _fn
del _family, _binding, _name, _fn


def bind(tensor_class):
    """Set every method of the table on Tensor (done once, when minidl is imported)."""
    for name, fn in METHODS.items():
        setattr(tensor_class, name, fn)


bind(conversion.Tensor)
