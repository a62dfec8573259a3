"""PyTorch's checkpoint format (torch.save's zip of a pickle and raw storages), read and written without torch
and without ever running code from a file.

A torch.save file is a zip: `<archive>/data.pkl` is a pickle of the object (protocol 2), whose tensors are
calls of `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)` and whose
storages are *persistent ids* `('storage', torch.FloatStorage, key, location, numel)` naming the raw
little-endian bytes in `<archive>/data/<key>`.

Reading: the pickle is run by a restricted unpickler, as torch.load(weights_only=True) does. Opcodes that
build containers and plain values (dicts, lists, tuples, numbers, strings, bytes, None, booleans) are
Python's own; a GLOBAL (the only way a pickle names code to call) is allowed only for the handful of names
in ALLOWED (the tensor and parameter rebuilders, the storage types, OrderedDict), each mapped to a function
of ours: nothing from the file is imported or called. Any other global ends the load with a CheckpointError
naming it (`os.system`, `builtins.eval`, ...).

Writing (`minidl.save(obj, f, format="torch")`): the same zip, with a pickle written opcode by opcode
(so torch need not be installed), that `torch.load(f, weights_only=True)` reads: tensors as
_rebuild_tensor_v2, Parameters as _rebuild_parameter, dicts as OrderedDicts where they were.
"""
from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile

import numpy as np

from .._dtypes import bfloat16

# storage type name -> NumPy dtype
STORAGE_DTYPES = {
    "FloatStorage": np.dtype(np.float32), "DoubleStorage": np.dtype(np.float64), "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": np.dtype(bfloat16), "LongStorage": np.dtype(np.int64), "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16), "CharStorage": np.dtype(np.int8), "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
}
DTYPE_STORAGES = {v: k for k, v in STORAGE_DTYPES.items()}


class _StorageType:
    """What the unpickler hands back for torch.FloatStorage & co.: just the element type."""

    def __init__(self, name):
        self.name, self.dtype = name, STORAGE_DTYPES[name]


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
    """The tensor of `size` with `stride` (in elements) starting `storage_offset` elements into `storage`."""
    from ..autograd.tensor import Tensor

    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise ValueError(f"a tensor of size {size} and stride {stride}")
    flat = storage
    if 0 in size:
        array = np.empty(size, dtype=flat.dtype)
    else:
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
        if storage_offset < 0 or last >= flat.size:
            raise ValueError(f"a tensor of size {size}, stride {stride} and offset {storage_offset} reads past its "
                             f"storage of {flat.size} elements")
        item = flat.itemsize
        array = np.lib.stride_tricks.as_strided(flat[storage_offset:], shape=size,
                                                strides=tuple(s * item for s in stride)).copy()
    t = Tensor._make(array)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_parameter(data, requires_grad=True, backward_hooks=None, *state):
    from ..nn.module import Parameter

    return Parameter(data, requires_grad=bool(requires_grad))


def _ordered_dict(*args):
    return collections.OrderedDict(*args)


# (module, name) a pickle may name -> what it gets instead (ours)
ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
}
ALLOWED.update({("torch", name): _StorageType(name) for name in STORAGE_DTYPES})


class RefusedGlobal(pickle.UnpicklingError):
    pass


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, fh, load_storage):
        super().__init__(fh)
        self._load_storage = load_storage

    def find_class(self, module, name):
        target = ALLOWED.get((module, name))
        if target is None:
            raise RefusedGlobal(f"{module}.{name}")
        return target

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
            raise pickle.UnpicklingError(f"an unexpected persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid[:5]
        return self._load_storage(storage_type.dtype, str(key), int(numel))


def is_torch_zip(zf: zipfile.ZipFile) -> bool:
    return any(n == "data.pkl" or n.endswith("/data.pkl") for n in zf.namelist())


def read(zf: zipfile.ZipFile, name: str, max_bytes):
    """The object in the torch.save zip `zf` (a CheckpointError from the caller's wrapper on anything bad)."""
    from .serialization import CheckpointError

    pkl = next(n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl"))
    prefix = pkl[: -len("data.pkl")]
    byteorder = prefix + "byteorder"
    if byteorder in zf.namelist() and zf.read(byteorder).strip() not in (b"little", b""):
        raise CheckpointError(f"load: {name} was written big-endian; only little-endian torch files are read")
    loaded = {}

    def load_storage(dtype, key, numel):
        entry = prefix + "data/" + key
        if entry not in zf.namelist():
            raise CheckpointError(f"load: {name} refers to a missing storage {entry!r}")
        info = zf.getinfo(entry)
        if numel < 0 or numel * dtype.itemsize > info.file_size:
            raise CheckpointError(f"load: {name}: storage {key} claims {numel} elements, its entry holds "
                                  f"{info.file_size} bytes")
        if key not in loaded:
            raw = zf.read(entry)
            loaded[key] = np.frombuffer(raw, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 and
                                        dtype.kind != "V" else dtype, count=numel).astype(dtype, copy=True)
        return loaded[key]

    info = zf.getinfo(pkl)
    if max_bytes is not None and info.file_size > max_bytes:
        raise CheckpointError(f"load: {name}: {pkl} is {info.file_size} bytes, more than a checkpoint's object needs")
    try:
        return _RestrictedUnpickler(io.BytesIO(zf.read(pkl)), load_storage).load()
    except RefusedGlobal as e:
        raise CheckpointError(
            f"load: {name} names {e} in its pickle, which minidl.load refuses: a torch checkpoint may only build "
            "tensors, parameters, storages, OrderedDicts and plain values (as torch.load(weights_only=True)); "
            "anything else would run code named by the file") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, struct.error, IndexError, KeyError) as e:
        raise CheckpointError(f"load: {name}: its pickle is damaged or not a torch checkpoint ({type(e).__name__}: {e})") \
            from None


# ------------------------------------------------------------------------------------------------
# Writing: a protocol-2 pickle, opcode by opcode
# ------------------------------------------------------------------------------------------------


class _Writer:
    def __init__(self):
        self.out = io.BytesIO()
        self.storages = []   # (key, bytes)

    def op(self, code: bytes, payload: bytes = b""):
        self.out.write(code + payload)

    def global_(self, module, name):
        self.op(pickle.GLOBAL, f"{module}\n{name}\n".encode())

    def value(self, obj):
        from ..autograd.tensor import Tensor

        if obj is None:
            self.op(pickle.NONE)
        elif isinstance(obj, (bool, np.bool_)):
            self.op(pickle.NEWTRUE if obj else pickle.NEWFALSE)
        elif isinstance(obj, (int, np.integer)):
            v = int(obj)
            if -(2**31) <= v < 2**31:
                self.op(pickle.BININT, struct.pack("<i", v))
            else:
                raw = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
                self.op(pickle.LONG1, bytes([len(raw)]) + raw)
        elif isinstance(obj, (float, np.floating)):
            self.op(pickle.BINFLOAT, struct.pack(">d", float(obj)))
        elif isinstance(obj, str):
            raw = obj.encode("utf-8")
            self.op(pickle.BINUNICODE, struct.pack("<I", len(raw)) + raw)
        elif isinstance(obj, Tensor):
            self.tensor(obj)
        elif isinstance(obj, np.ndarray):
            self.tensor(Tensor._make(obj))
        elif isinstance(obj, dict):   # as an OrderedDict (what torch's state dicts are; a dict reads back the same)
            self.global_("collections", "OrderedDict")
            self.op(pickle.EMPTY_TUPLE)
            self.op(pickle.REDUCE)
            if obj:
                self.op(pickle.MARK)
                for k, v in obj.items():
                    self.value(k)
                    self.value(v)
                self.op(pickle.SETITEMS)
        elif isinstance(obj, list):
            self.op(pickle.EMPTY_LIST)
            if obj:
                self.op(pickle.MARK)
                for v in obj:
                    self.value(v)
                self.op(pickle.APPENDS)
        elif isinstance(obj, tuple):
            self.op(pickle.MARK)
            for v in obj:
                self.value(v)
            self.op(pickle.TUPLE)
        else:
            raise TypeError(f"save(format='torch'): cannot write a {type(obj).__name__} (tensors, arrays, dicts, "
                            "lists, tuples, numbers, strings, booleans and None only)")

    def tensor(self, t):
        is_param = type(t).__name__ == "Parameter"
        raw = t._host_array()
        host = np.ascontiguousarray(raw).reshape(raw.shape)   # (ascontiguousarray makes a 0-d array 1-d)
        storage = DTYPE_STORAGES.get(host.dtype)
        if storage is None:
            raise TypeError(f"save(format='torch'): no torch storage for dtype {host.dtype}")
        key = str(len(self.storages))
        self.storages.append((key, host.astype(host.dtype.newbyteorder("<")) if host.dtype.itemsize > 1
                              and host.dtype.kind != "V" else host))
        if is_param:
            self.global_("torch._utils", "_rebuild_parameter")
            self.op(pickle.MARK)
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.op(pickle.MARK)
        # the storage: a persistent id ('storage', torch.XStorage, key, 'cpu', numel)
        self.op(pickle.MARK)
        self.value("storage")
        self.global_("torch", storage)
        self.value(key)
        self.value("cpu")
        self.value(int(host.size))
        self.op(pickle.TUPLE)
        self.op(pickle.BINPERSID)
        self.value(0)
        self.value(tuple(int(s) for s in host.shape))
        self.value(tuple(s // host.itemsize for s in host.strides) if host.size else (1,) * host.ndim)
        self.value(bool(t.requires_grad) and not is_param)
        self.global_("collections", "OrderedDict")
        self.op(pickle.EMPTY_TUPLE)
        self.op(pickle.REDUCE)
        self.op(pickle.TUPLE)
        self.op(pickle.REDUCE)
        if is_param:
            self.value(bool(t.requires_grad))
            self.global_("collections", "OrderedDict")
            self.op(pickle.EMPTY_TUPLE)
            self.op(pickle.REDUCE)
            self.op(pickle.TUPLE)
            self.op(pickle.REDUCE)


def write(obj, fileobj, archive="archive"):
    """Write obj as torch.save would (the zip format torch.load reads, weights_only=True included)."""
    w = _Writer()
    w.op(pickle.PROTO, b"\x02")
    w.value(obj)
    w.op(pickle.STOP)
    with zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{archive}/data.pkl", w.out.getvalue())
        zf.writestr(f"{archive}/byteorder", "little")
        for key, array in w.storages:
            zf.writestr(f"{archive}/data/{key}", array.tobytes())
        zf.writestr(f"{archive}/version", "3\n")
