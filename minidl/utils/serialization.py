"""minidl.save / minidl.load: checkpoints without pickle.

A checkpoint (a model's or an optimizer's state dict, or any nesting of dicts, lists and tuples of
tensors, arrays, numbers, strings, bools and None) is written as a zip file in NumPy's .npz style:

    arr_0.npy, arr_1.npy, ...   every tensor and array, written by np.lib.format with allow_pickle=False
    structure.json              the nesting, with each array replaced by a reference to its entry

Why not pickle (what torch.save uses)? Unpickling runs code named by the file, so loading an untrusted
pickle can do anything. Reading .npy arrays and JSON can only ever produce arrays and plain values, and
`load` refuses files that would need unpickling (a pickle, or a .npy holding Python objects).

Saving is atomic: the zip is written to a temporary file in the target's directory, flushed and
fsync'ed, then renamed over the target with os.replace. A crash (or an error) mid-save leaves the
previous checkpoint untouched.
"""
from __future__ import annotations

import json
import numbers
import os
import tempfile
import zipfile

import numpy as np

from .._dtypes import bfloat16
from .. import _device
from ..autograd.tensor import Tensor

FORMAT_NAME = "minidl.checkpoint"
FORMAT_VERSION = 1
STRUCTURE_ENTRY = "structure.json"


class CheckpointError(ValueError):
    """A file that minidl.load will not read: not a minidl checkpoint, damaged, or needing pickle."""


# ------------------------------------------------------------------------------------------------
# Encoding: Python objects <-> a JSON tree plus a list of arrays
# ------------------------------------------------------------------------------------------------


def _encode(obj, arrays: list, where: str):
    """One node of the JSON tree. Arrays are appended to `arrays` and referenced by entry name."""
    if obj is None:
        return {"type": "none"}
    if isinstance(obj, (bool, np.bool_)):
        return {"type": "bool", "value": bool(obj)}
    if isinstance(obj, Tensor):
        host = obj._data.get() if obj.is_cuda else obj._data
        node = {"type": "tensor", "entry": _add_array(host, arrays, where), "device": str(obj.device),
                "requires_grad": bool(obj.requires_grad)}
        if type(obj).__name__ == "Parameter":
            node["parameter"] = True
        return node
    if isinstance(obj, np.ndarray) or _device.is_cuda_array(obj):
        host = obj.get() if _device.is_cuda_array(obj) else obj
        node = {"type": "ndarray", "entry": _add_array(host, arrays, where)}
        if _device.is_cuda_array(obj):
            node["device"] = str(_device.device_of(obj))
        return node
    if isinstance(obj, np.generic):  # a NumPy scalar keeps its dtype: stored as a 0-d array
        return {"type": "numpy_scalar", "entry": _add_array(np.asarray(obj), arrays, where)}
    if isinstance(obj, numbers.Integral):
        return {"type": "int", "value": int(obj)}
    if isinstance(obj, float):
        # repr round-trips every float exactly, and also spells inf and nan (which JSON cannot).
        return {"type": "float", "value": repr(float(obj))}
    if isinstance(obj, complex):
        return {"type": "complex", "value": [repr(obj.real), repr(obj.imag)]}
    if isinstance(obj, str):
        return {"type": "str", "value": obj}
    if isinstance(obj, (list, tuple)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {"type": kind, "items": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        # Keys need not be strings (optimizer state is keyed by parameter index), so each key is a node.
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool, tuple)) and k is not None:
                raise TypeError(f"save: dict key {k!r} at {where} is a {type(k).__name__}; keys must be str, int, float, bool, None or tuples")
            items.append([_encode(k, arrays, f"{where} key"), _encode(v, arrays, f"{where}[{k!r}]")])
        return {"type": "dict", "items": items}
    raise TypeError(
        f"save: cannot store a {type(obj).__name__} at {where}: minidl.save writes tensors, arrays, numbers, "
        "strings, bools, None and dicts/lists/tuples of them, and never pickles arbitrary objects "
        "(save obj.state_dict() instead of a whole model or optimizer)"
    )


BFLOAT16_SUFFIX = ".bfloat16.npy"


def _add_array(array: np.ndarray, arrays: list, where: str) -> str:
    if array.dtype.hasobject:
        raise TypeError(f"save: the array at {where} holds Python objects (dtype {array.dtype}); they would need pickle")
    if array.dtype == bfloat16:
        # .npy has no bfloat16 type (it would read back as raw void bytes): store the bits as uint16
        # and let the entry's name say how to view them.
        name = f"arr_{len(arrays)}{BFLOAT16_SUFFIX}"
        arrays.append((name, np.ascontiguousarray(array).view(np.uint16)))
        return name
    name = f"arr_{len(arrays)}.npy"
    arrays.append((name, array))
    return name


def _decode(node, read_array, place, where: str):
    kind = node.get("type")
    if kind == "none":
        return None
    if kind == "bool":
        return bool(node["value"])
    if kind == "int":
        return int(node["value"])
    if kind == "float":
        return float(node["value"])
    if kind == "complex":
        return complex(float(node["value"][0]), float(node["value"][1]))
    if kind == "str":
        return str(node["value"])
    if kind == "list":
        return [_decode(v, read_array, place, f"{where}[{i}]") for i, v in enumerate(node["items"])]
    if kind == "tuple":
        return tuple(_decode(v, read_array, place, f"{where}[{i}]") for i, v in enumerate(node["items"]))
    if kind == "dict":
        out = {}
        for key_node, value_node in node["items"]:
            key = _decode(key_node, read_array, place, f"{where} key")
            out[key] = _decode(value_node, read_array, place, f"{where}[{key!r}]")
        return out
    if kind == "numpy_scalar":
        return read_array(node["entry"])[()]
    if kind == "ndarray":
        array = read_array(node["entry"])
        return _device.move_array(array, place(node["device"])) if "device" in node else array
    if kind == "tensor":
        array = _device.move_array(read_array(node["entry"]), place(node["device"]))
        if node.get("parameter"):
            try:
                from ..nn import Parameter

                return Parameter(Tensor._make(array), requires_grad=bool(node["requires_grad"]))
            except ImportError:  # nn not available: a plain tensor carries the same numbers
                pass
        t = Tensor._make(array)
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t
    raise CheckpointError(f"load: unknown entry type {kind!r} at {where}; the file is damaged or from a newer minidl")


# ------------------------------------------------------------------------------------------------
# save
# ------------------------------------------------------------------------------------------------


def _current_umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save(obj, f) -> None:
    """Write obj (a state dict or a nesting of tensors, arrays and plain values) to the path f.

    f may also be a writable binary file object (then the write is not atomic: the caller owns it).
    """
    arrays: list = []
    structure = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "object": _encode(obj, arrays, "obj")}
    # Everything is encoded before the file is touched: an unsupported object changes nothing on disk.
    if hasattr(f, "write"):
        _write_zip(f, structure, arrays)
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file 0600 (private to its writer); a checkpoint is an ordinary file, so
        # give it the mode open() would: 0666 less the umask (0644 under the usual umask 022).
        if hasattr(os, "fchmod"):  # POSIX
            os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as tmp:
            _write_zip(tmp, structure, arrays)
            tmp.flush()
            os.fsync(tmp.fileno())  # the bytes are on disk before the rename makes them the checkpoint
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def _write_zip(fileobj, structure: dict, arrays: list) -> None:
    with zipfile.ZipFile(fileobj, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays:
            with zf.open(name, mode="w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asarray(array), allow_pickle=False)
        zf.writestr(STRUCTURE_ENTRY, json.dumps(structure, allow_nan=False))


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# load
# ------------------------------------------------------------------------------------------------


def _placement(map_location):
    """A function saved_device_string -> the device to load onto."""
    if map_location is None:
        def place(saved):
            device = _device.Device(saved)
            if device.type == "cuda" and _device.cuda_unavailable_reason() is not None:
                return _device.CPU  # saved on a GPU, loaded where there is none
            return device
        return place
    if isinstance(map_location, (str, _device.Device)):
        target = _device.Device(map_location)
        if target.type == "cuda":
            _device.require_cuda("load(map_location='cuda')")
        return lambda saved: target
    raise TypeError(
        f"load: map_location must be None, 'cpu', 'cuda', 'cuda:N' or a minidl.device, got {type(map_location).__name__}"
    )


def load(f, map_location=None, weights_only=None):
    """Read a checkpoint written by minidl.save.

    weights_only: accepted for PyTorch's signature; minidl's loading is always "weights only" (it
    never unpickles), whatever the value.

    map_location: None puts each tensor back on the device it was saved from (the CPU if that GPU is
    not available here); 'cpu', 'cuda' or 'cuda:N' puts every tensor there.
    Refuses, with a CheckpointError saying why, anything that would need unpickling.
    """
    place = _placement(map_location)
    if hasattr(f, "read"):
        name, fh, owned = getattr(f, "name", "<file object>"), f, False
    else:
        name, fh, owned = os.fspath(f), open(f, "rb"), True
    try:
        return _load_from(fh, name, place)
    finally:
        if owned:
            fh.close()


def _load_from(fh, name, place):
    start = fh.tell()
    head = fh.read(2)
    fh.seek(start)
    if not zipfile.is_zipfile(fh):
        if head[:1] == b"\x80" or head in (b"(d", b"(l", b"}q"):
            raise CheckpointError(
                f"load: {name} is a pickle file (from torch.save or pickle.dump?); minidl.load never unpickles, "
                "because unpickling can run arbitrary code. Convert it to arrays and save it with minidl.save."
            )
        raise CheckpointError(f"load: {name} is not a minidl checkpoint (not a zip file)")
    fh.seek(start)
    with zipfile.ZipFile(fh) as zf:
        names = set(zf.namelist())
        if STRUCTURE_ENTRY not in names:
            if "data.pkl" in names or any(n.endswith("/data.pkl") for n in names):
                raise CheckpointError(
                    f"load: {name} is a torch.save checkpoint, which is a pickle inside a zip; minidl.load never "
                    "unpickles, because unpickling can run arbitrary code."
                )
            raise CheckpointError(f"load: {name} has no {STRUCTURE_ENTRY}, so it is not a minidl checkpoint")
        try:
            structure = json.loads(zf.read(STRUCTURE_ENTRY).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"load: {name}: {STRUCTURE_ENTRY} is not valid JSON ({e})") from None
        if not isinstance(structure, dict) or structure.get("format") != FORMAT_NAME:
            raise CheckpointError(f"load: {name} is not a minidl checkpoint (format {structure.get('format')!r})")
        if structure.get("version", 0) > FORMAT_VERSION:
            raise CheckpointError(f"load: {name} has format version {structure['version']}; this minidl reads up to {FORMAT_VERSION}")

        def read_array(entry: str):
            if entry not in names:
                raise CheckpointError(f"load: {name} refers to a missing entry {entry}")
            with zf.open(entry) as fh:
                try:
                    array = np.lib.format.read_array(fh, allow_pickle=False)
                    if entry.endswith(BFLOAT16_SUFFIX):
                        if array.dtype != np.uint16:
                            raise ValueError(f"a bfloat16 entry must hold uint16 bits, got {array.dtype}")
                        array = array.view(bfloat16)
                    return array
                except ValueError as e:
                    if "pickle" in str(e).lower() or "object" in str(e).lower():
                        raise CheckpointError(
                            f"load: entry {entry} of {name} holds Python objects, which would need unpickling; "
                            "minidl.load refuses them because unpickling can run arbitrary code"
                        ) from None
                    raise CheckpointError(f"load: entry {entry} of {name} is not a valid .npy array ({e})") from None

        return _decode(structure["object"], read_array, place, "obj")
