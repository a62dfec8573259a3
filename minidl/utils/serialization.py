"""minidl.save / minidl.load: checkpoints without pickle (and, asked for, a whole object with it).

A checkpoint (a model's or an optimizer's state dict, or any nesting of dicts, lists and tuples of
tensors, arrays, numbers, strings, bools and None) is written as a zip file in NumPy's .npz style:

    arr_0.npy, arr_1.npy, ...   every tensor and array, written by np.lib.format with allow_pickle=False
    structure.json              the nesting, with each array replaced by a reference to its entry

Why not pickle (what torch.save uses)? Unpickling runs code named by the file, so loading an untrusted
pickle can do anything. Reading .npy arrays and JSON can only ever produce arrays and plain values, and
`load` refuses files that would need unpickling (a pickle, or a .npy holding Python objects).

A whole object that is not plain data (a model saved as torch.save(model), an optimizer, a custom class) is written
with pickle instead, as torch.save does, in the same zip (object.pkl, with structure.json saying so; GPU arrays as
host copies that load puts back on a GPU). `load` reads it as torch.load does since PyTorch 2.6: by default with a
restricted unpickler that builds only tensors, parameters, arrays, OrderedDicts and the classes the caller allows
(`safe_globals([Net, nn.Conv2d])`, `add_safe_globals`), and with plain pickle only under weights_only=False, the
caller vouching for the file.

Saving is atomic: the zip is written to a temporary file in the target's directory, flushed and
fsync'ed, then renamed over the target with os.replace. A crash (or an error) mid-save leaves the
previous checkpoint untouched. A temporary file left by a killed save (`.<name>.<pid>.<random>.minidl.tmp`)
is removed by the next save to that folder, once its process is gone.

Loading trusts nothing in the file: every way a file can be malformed (not a zip, a flipped byte
caught by the CRC, a structure.json that is not JSON or not our tree, an entry missing, an .npy header
that claims more bytes than the entry holds) ends in one CheckpointError naming the file and what is
wrong, and sizes are checked against the entry's real size before anything is allocated.
"""
from __future__ import annotations

import io
import json
import numbers
import os
import re
import tempfile
import threading
import zipfile
import zlib

import numpy as np

from .._dtypes import bfloat16, is_floating
from .. import _device
from ..autograd.tensor import Tensor

FORMAT_NAME = "minidl.checkpoint"
FORMAT_VERSION = 2          # 2: a whole object pickled (PICKLE_ENTRY); plain data is still written as version 1
STRUCTURE_ENTRY = "structure.json"
PICKLE_ENTRY = "object.pkl"


class _NeedsPickle(TypeError):
    """What _encode raises for an object that is not plain data: save pickles the whole object instead."""


class CheckpointError(ValueError):
    """A file that minidl.load will not read: not a minidl checkpoint, damaged, or needing pickle.
    The message names the file and the problem."""


# Limits checked before allocating: structure.json is a few KB for any real model; deeper nesting
# than this is a crafted file (Python's recursion would fail first). Deflate cannot compress more
# than about 1032:1, so a compressed entry claiming more is lying about its size.
MAX_STRUCTURE_BYTES = 64 * 2**20
MAX_NESTING = 200
MAX_DEFLATE_RATIO = 1100


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
                raise _NeedsPickle(f"save: dict key {k!r} at {where} is a {type(k).__name__}; keys must be str, int, float, bool, None or tuples")
            items.append([_encode(k, arrays, f"{where} key"), _encode(v, arrays, f"{where}[{k!r}]")])
        return {"type": "dict", "items": items}
    raise _NeedsPickle(
        f"save: cannot store a {type(obj).__name__} at {where} as plain data: minidl.save writes tensors, arrays, "
        "numbers, strings, bools, None and dicts/lists/tuples of them without pickle (save obj.state_dict() instead "
        "of a whole model or optimizer)"
    )


BFLOAT16_SUFFIX = ".bfloat16.npy"


def _add_array(array: np.ndarray, arrays: list, where: str) -> str:
    if array.dtype.hasobject:
        raise _NeedsPickle(f"save: the array at {where} holds Python objects (dtype {array.dtype}); they would need pickle")
    if array.dtype == bfloat16:
        # .npy has no bfloat16 type (it would read back as raw void bytes): store the bits as uint16
        # and let the entry's name say how to view them.
        name = f"arr_{len(arrays)}{BFLOAT16_SUFFIX}"
        arrays.append((name, np.ascontiguousarray(array).view(np.uint16)))
        return name
    name = f"arr_{len(arrays)}.npy"
    arrays.append((name, array))
    return name


def _decode(node, read_array, place, where: str, depth: int = 0):
    if depth > MAX_NESTING:
        raise CheckpointError(f"nesting deeper than {MAX_NESTING} levels at {where}")
    if not isinstance(node, dict):
        raise CheckpointError(f"expected an entry (a JSON object) at {where}, got {type(node).__name__}")
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
        return [_decode(v, read_array, place, f"{where}[{i}]", depth + 1) for i, v in enumerate(_items(node, where))]
    if kind == "tuple":
        return tuple(_decode(v, read_array, place, f"{where}[{i}]", depth + 1) for i, v in enumerate(_items(node, where)))
    if kind == "dict":
        out = {}
        for pair in _items(node, where):
            if not isinstance(pair, list) or len(pair) != 2:
                raise CheckpointError(f"a dict item at {where} is not a [key, value] pair")
            key = _decode(pair[0], read_array, place, f"{where} key", depth + 1)
            try:
                hash(key)
            except TypeError:
                raise CheckpointError(f"a dict key at {where} is a {type(key).__name__}, which cannot be a key") from None
            out[key] = _decode(pair[1], read_array, place, f"{where}[{key!r}]", depth + 1)
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
        if node.get("requires_grad") and not is_floating(array.dtype):
            raise CheckpointError(f"the {array.dtype} tensor at {where} is marked requires_grad; only float tensors can be")
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t
    raise CheckpointError(f"unknown entry type {kind!r} at {where}; the file is damaged or from a newer minidl")


def _items(node, where):
    items = node.get("items")
    if not isinstance(items, list):
        raise CheckpointError(f"the {node.get('type')} at {where} has no list of items")
    return items


# ------------------------------------------------------------------------------------------------
# save
# ------------------------------------------------------------------------------------------------


def _current_umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save(obj, f, format: str = "minidl", **torch_kwargs) -> None:
    """Write obj (a state dict or a nesting of tensors, arrays and plain values) to the path f. Anything else (a
    whole model, as torch.save(model, path) saves it) is pickled into the checkpoint, which minidl.load then reads
    only with weights_only=False (see the module's docstring).

    f may also be a writable binary file object (then the write is not atomic: the caller owns it).
    format="torch": PyTorch's zip format (minidl/utils/torch_format.py), which torch.load reads, with
    weights_only=True too; the default is minidl's own (no pickle at all). minidl.load reads both.
    Keyword arguments of torch.save (pickle_protocol, _use_new_zipfile_serialization) are accepted.
    """
    if format not in ("minidl", "torch"):
        raise ValueError(f"save: format must be 'minidl' or 'torch', got {format!r}")
    if format == "torch":
        from . import torch_format

        buffer = io.BytesIO()
        torch_format.write(obj, buffer)   # everything encoded before the target file is touched
        write = lambda fh: fh.write(buffer.getvalue())  # noqa: E731
    else:
        arrays: list = []
        try:
            structure = {"format": FORMAT_NAME, "version": 1, "object": _encode(obj, arrays, "obj")}
            pickled = None
        except _NeedsPickle as plain_data_error:
            import pickle

            cls = type(obj)
            structure = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "pickled": PICKLE_ENTRY,
                         "class": f"{cls.__module__}.{cls.__qualname__}"}
            arrays = []
            try:
                pickled = _pickled(obj, protocol=torch_kwargs.get("pickle_protocol", pickle.DEFAULT_PROTOCOL))
            except (pickle.PicklingError, TypeError, AttributeError) as e:   # a lambda, a local class, a lock ...
                raise TypeError(f"{plain_data_error}; and pickle cannot store it either ({type(e).__name__}: "
                                f"{e})") from None
        # Everything is encoded before the file is touched: an object that cannot be saved changes nothing on disk.
        write = (lambda fh: _write_zip(fh, structure, arrays)) if pickled is None else (  # noqa: E731
            lambda fh: _write_zip(fh, structure, arrays, pickled))
    if hasattr(f, "write"):
        write(f)
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"save: the folder {directory} does not exist (create it first, e.g. "
                                f"os.makedirs({directory!r}, exist_ok=True)), so {path} cannot be written")
    if os.path.isdir(path):
        raise IsADirectoryError(f"save: {path} is a folder; give a file name inside it")
    _remove_stale_temporaries(directory)
    fd, tmp_path = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.{os.getpid()}.", suffix=_TMP_SUFFIX, dir=directory)
    with _in_flight_lock:
        _in_flight.add(tmp_path)
    try:
        # mkstemp makes the file 0600 (private to its writer); a checkpoint is an ordinary file, so
        # give it the mode open() would: 0666 less the umask (0644 under the usual umask 022).
        if hasattr(os, "fchmod"):  # POSIX
            os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as tmp:
            write(tmp)
            tmp.flush()
            os.fsync(tmp.fileno())  # the bytes are on disk before the rename makes them the checkpoint
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise
    finally:
        with _in_flight_lock:
            _in_flight.discard(tmp_path)
    _fsync_directory(directory)


_TMP_SUFFIX = ".minidl.tmp"
_TMP_NAME = re.compile(r"^\..+\.(\d+)\.[A-Za-z0-9_]+" + re.escape(_TMP_SUFFIX) + "$")
_in_flight: set = set()  # this process's saves under way (other threads may be saving right now)
_in_flight_lock = threading.Lock()


def _remove_stale_temporaries(directory: str) -> None:
    """Delete the temporary files of saves that were killed before their rename: those whose process
    is gone (or is this one, but not saving that file now). A live process's save is left alone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        match = _TMP_NAME.match(name)
        if not match:
            continue
        tmp_path = os.path.join(directory, name)
        pid = int(match.group(1))
        if pid == os.getpid():
            with _in_flight_lock:
                if tmp_path in _in_flight:
                    continue
        elif _process_alive(pid):
            continue
        try:
            os.unlink(tmp_path)
        except OSError:
            pass


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists but is not ours, or we cannot tell: keep its file
    return True


def _write_zip(fileobj, structure: dict, arrays: list, pickled: bytes | None = None) -> None:
    with zipfile.ZipFile(fileobj, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays:
            with zf.open(name, mode="w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.asarray(array), allow_pickle=False)
        if pickled is not None:
            zf.writestr(PICKLE_ENTRY, pickled)
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


def _npy_error(e, entry, name, what) -> "CheckpointError":
    """The CheckpointError for NumPy's ValueError reading entry `entry` of checkpoint `name`: objects that
    would need unpickling are refused as such; anything else is `what` (the entry's own fault)."""
    if "pickle" in str(e).lower() or "object" in str(e).lower():
        return CheckpointError(
            f"load: entry {entry} of {name} holds Python objects, which would need unpickling; "
            "minidl.load refuses them because unpickling can run arbitrary code")
    return CheckpointError(f"load: entry {entry} of {name} {what} ({e})")


def load(f, map_location=None, weights_only=None):
    """Read a checkpoint written by minidl.save.

    weights_only: a checkpoint of plain data (tensors, state dicts) is read the same whatever its value, without
    unpickling. A whole object that save pickled (a model saved as torch.save(model)) is read, as torch.load reads it
    since PyTorch 2.6, by a restricted unpickler that builds tensors, arrays and the classes allowed with
    safe_globals / add_safe_globals; weights_only=False unpickles it plainly, the caller vouching for the file.

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
        return _load_from(fh, name, place, weights_only, map_location)
    except CheckpointError as e:
        message = str(e)
        if not message.startswith("load:"):
            message = f"load: {name}: {message}"
        raise CheckpointError(message) from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, KeyError, IndexError, TypeError,
            AttributeError, ValueError, UnicodeDecodeError, RecursionError, MemoryError, OverflowError,
            NotImplementedError) as e:
        # Anything else the zip or .npy readers raise on a damaged file becomes one error type.
        raise CheckpointError(f"load: {name} is damaged or not a minidl checkpoint ({type(e).__name__}: {e})") from None
    finally:
        if owned:
            fh.close()


def _load_from(fh, name, place, weights_only=None, map_location=None):
    start = fh.tell()
    head = fh.read(2)
    fh.seek(start)
    if not zipfile.is_zipfile(fh):
        if head[:1] == b"\x80" or head in (b"(d", b"(l", b"}q"):
            raise CheckpointError(
                f"load: {name} is a plain pickle file (pickle.dump, or torch.save before PyTorch 1.6); minidl.load "
                "reads torch's zip checkpoints with a restricted unpickler, not raw pickles. Re-save it with a "
                "current torch.save, or convert it to arrays and save it with minidl.save."
            )
        raise CheckpointError(f"load: {name} is not a minidl checkpoint (not a zip file)")
    fh.seek(start)
    with zipfile.ZipFile(fh) as zf:
        names = set(zf.namelist())
        if STRUCTURE_ENTRY not in names:
            from . import torch_format

            if torch_format.is_torch_zip(zf):   # torch.save's format, read by a restricted unpickler
                return _placed(torch_format.read(zf, name, MAX_STRUCTURE_BYTES), place)
            raise CheckpointError(f"load: {name} has no {STRUCTURE_ENTRY}, so it is neither a minidl nor a torch "
                                  "checkpoint")
        _check_entry_size(zf.getinfo(STRUCTURE_ENTRY), MAX_STRUCTURE_BYTES, name)
        try:
            structure = json.loads(zf.read(STRUCTURE_ENTRY).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise CheckpointError(f"load: {name}: {STRUCTURE_ENTRY} is not valid JSON ({type(e).__name__}: {e})") from None
        if not isinstance(structure, dict):
            raise CheckpointError(f"load: {name}: {STRUCTURE_ENTRY} holds a {type(structure).__name__}, not an object")
        if structure.get("format") != FORMAT_NAME:
            raise CheckpointError(f"load: {name} is not a minidl checkpoint (format {structure.get('format')!r})")
        version = structure.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int):
            raise CheckpointError(f"load: {name}: format version {version!r} is not an integer")
        if version > FORMAT_VERSION:
            raise CheckpointError(f"load: {name} has format version {version}; this minidl reads up to {FORMAT_VERSION}")
        if "pickled" in structure:
            return _unpickle(zf, structure, names, name, weights_only, map_location)
        if "object" not in structure:
            raise CheckpointError(f"load: {name}: {STRUCTURE_ENTRY} has no 'object'")

        def read_array(entry: str):
            if not isinstance(entry, str) or entry not in names or entry == STRUCTURE_ENTRY:
                raise CheckpointError(f"load: {name} refers to a missing entry {entry!r}")
            info = zf.getinfo(entry)
            _check_entry_size(info, None, name)
            with zf.open(entry) as fh:
                try:
                    _check_npy_header(fh, info, entry, name)
                    array = np.lib.format.read_array(fh, allow_pickle=False)
                    if entry.endswith(BFLOAT16_SUFFIX):
                        if array.dtype != np.uint16:
                            raise ValueError(f"a bfloat16 entry must hold uint16 bits, got {array.dtype}")
                        array = array.view(bfloat16)
                    return array
                except ValueError as e:
                    raise _npy_error(e, entry, name, "is not a valid .npy array") from None

        return _decode(structure["object"], read_array, place, "obj")


# ------------------------------------------------------------------------------------------------
# Whole objects: pickled by save, unpickled by load (restricted unless weights_only=False)
# ------------------------------------------------------------------------------------------------

_SAFE_GLOBALS: list = []   # what add_safe_globals / safe_globals allowed (objects: classes, functions)


def add_safe_globals(safe_globals) -> None:
    """Allow these classes or functions in a pickled checkpoint read with weights_only=True (torch's name)."""
    _SAFE_GLOBALS.extend(safe_globals)


def get_safe_globals() -> list:
    return list(_SAFE_GLOBALS)


def clear_safe_globals() -> None:
    _SAFE_GLOBALS.clear()


class safe_globals:  # noqa: N801 - torch's name
    """`with safe_globals([Net, nn.Conv2d]):` the loads inside may build these (torch.serialization.safe_globals)."""

    def __init__(self, globals_list):
        self.globals_list = list(globals_list)

    def __enter__(self):
        self._before = list(_SAFE_GLOBALS)
        _SAFE_GLOBALS.extend(self.globals_list)

    def __exit__(self, *exc):
        _SAFE_GLOBALS[:] = self._before
        return False


def _rebuild_array(host, device_index):
    """A pickled GPU array: back on that GPU, or where map_location says (the CPU without a GPU)."""
    target = _UNPICKLE_PLACE[-1](f"cuda:{device_index}")
    return host if target.type == "cpu" else _device.move_array(host, target)


_UNPICKLE_PLACE: list = []   # the map_location of the load under way (a stack: loads may nest)


def _pickled(obj, protocol):
    """pickle.dumps with GPU arrays written as host copies and their device (see _rebuild_array)."""
    import pickle

    class Pickler(pickle.Pickler):
        def reducer_override(self, value):
            if _device.is_cuda_array(value):
                return _rebuild_array, (_device.move_array(value, "cpu"), int(value.device.id))
            return NotImplemented

    buffer = io.BytesIO()
    Pickler(buffer, protocol=protocol).dump(obj)
    return buffer.getvalue()


def _always_safe():
    """(module, name) pairs a restricted load builds without being told: containers, arrays, tensors, and the plain
    data classes minidl's layers hold (their descriptors)."""
    return {("collections", "OrderedDict"), ("builtins", "dict"), ("builtins", "set"), ("builtins", "frozenset"),
            ("builtins", "slice"), ("builtins", "complex"), ("numpy", "ndarray"), ("numpy", "dtype"),
            ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
            ("minidl.autograd.tensor", "Tensor"), ("minidl.nn.module", "Parameter"), ("minidl.nn.parameter", "Buffer"),
            ("minidl.utils.serialization", "_rebuild_array"),
            ("minidl.primitives.convolution_problem", "ConvolutionDescriptor"),
            ("minidl.primitives.rnn", "RNNDescriptor")}


def _restricted_loads(payload, name):
    import pickle

    allowed_pairs = _always_safe()
    allowed_objects = {id(o) for o in _SAFE_GLOBALS}

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, qualname):
            if (module, qualname) in allowed_pairs:
                return super().find_class(module, qualname)
            try:
                found = super().find_class(module, qualname)
            except (ImportError, AttributeError) as e:
                raise CheckpointError(f"load: {name} names {module}.{qualname}, which cannot be imported here "
                                      f"({type(e).__name__}: {e})") from None
            if id(found) in allowed_objects:
                return found
            raise CheckpointError(
                f"load: {name}: weights-only load refused {module}.{qualname}: a restricted load builds tensors, "
                f"arrays and the classes you allow. If you trust this file, allow it: `with "
                f"minidl.serialization.safe_globals([{qualname}]): minidl.load(f)` (torch.serialization's names), "
                f"or load with weights_only=False")

    return Unpickler(io.BytesIO(payload)).load()


def _unpickle(zf, structure, names, name, weights_only, map_location):
    """A whole object save pickled: a restricted unpickler unless weights_only=False (torch.load's rule)."""
    entry = structure["pickled"]
    if entry not in names:
        raise CheckpointError(f"load: {name} refers to a missing entry {entry!r}")
    payload = zf.read(entry)
    _UNPICKLE_PLACE.append(_placement(map_location))
    try:
        if weights_only is False:
            import pickle

            obj = pickle.loads(payload)
        else:
            obj = _restricted_loads(payload, name)
    finally:
        _UNPICKLE_PLACE.pop()
    if map_location is not None and hasattr(obj, "to") and callable(obj.to):   # a model or a tensor: moved whole
        obj = obj.to(_placement(map_location)("cpu"))
    return obj


def _placed(obj, place):
    """A torch checkpoint's tensors (read on the CPU) moved where map_location puts a CPU-saved tensor."""
    target = place("cpu")
    if target.type == "cpu":
        return obj
    if isinstance(obj, Tensor):
        return obj.to(target)
    if isinstance(obj, dict):
        return type(obj)((k, _placed(v, place)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_placed(v, place) for v in obj)
    return obj


def _check_entry_size(info: zipfile.ZipInfo, limit, name: str) -> None:
    """A stored entry holds exactly its bytes; a compressed one cannot expand more than deflate allows."""
    if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
        raise CheckpointError(
            f"load: {name}: entry {info.filename} claims {info.file_size} bytes but stores {info.compress_size}"
        )
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_DEFLATE_RATIO * info.compress_size + 1024:
        raise CheckpointError(
            f"load: {name}: entry {info.filename} claims {info.file_size} bytes from {info.compress_size} compressed"
        )
    if limit is not None and info.file_size > limit:
        raise CheckpointError(f"load: {name}: entry {info.filename} has {info.file_size} bytes, more than the {limit} allowed")


def _check_npy_header(fh, info: zipfile.ZipInfo, entry: str, name: str) -> None:
    """Read the .npy header and check that the array it describes is exactly what the entry holds,
    before read_array allocates it (a header claiming terabytes is refused here). Rewinds fh."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except ValueError as e:
        raise _npy_error(e, entry, name, "has a malformed .npy header") from None
    if dtype.hasobject:
        raise CheckpointError(
            f"load: entry {entry} of {name} holds Python objects, which would need unpickling; "
            "minidl.load refuses them because unpickling can run arbitrary code"
        )
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise CheckpointError(f"load: entry {entry} of {name} has an invalid shape {shape}")
    header_len = fh.tell()
    count = 1
    for d in shape:
        count *= d
    claimed = count * dtype.itemsize
    if header_len + claimed != info.file_size:
        raise CheckpointError(
            f"load: entry {entry} of {name}: its header says shape {shape} of {dtype} ({claimed} bytes), "
            f"but the entry holds {info.file_size - header_len} bytes of data"
        )
    fh.seek(0)
