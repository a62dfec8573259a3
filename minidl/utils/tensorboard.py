"""torch.utils.tensorboard's SummaryWriter: training curves as TensorBoard event files, written here without
TensorBoard or protobuf installed (TensorBoard itself is only needed to look at them: `tensorboard --logdir runs`).

An event file is a TFRecord stream: each record is

    uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data

and each record's data is one `Event` protocol buffer: the first says the file's version ("brain.Event:2"), the
others hold a step, a wall time and a `Summary` of tagged values. The few protobuf fields used are written by
hand below (a field is a key, (number << 3) | wire type, then a varint, 4 or 8 little-endian bytes, or a
length-prefixed message): scalars (`add_scalar`, `add_scalars`), histograms (`add_histogram`) and text
(`add_text`). Images, graphs, embeddings, audio and hparams are not written: those methods warn once and do
nothing, so a training script that calls them still runs.
"""
from __future__ import annotations

import os
import socket
import struct
import time
import warnings
from datetime import datetime

import numpy as np

__all__ = ["SummaryWriter"]


# ---- CRC-32C (Castagnoli), as TFRecord checks records ------------------------------------------------------------
def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- protobuf fields ------------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1   # negative int64s as protobuf writes them: ten bytes of two's complement
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _double_field(number: int, value: float) -> bytes:
    return _key(number, 1) + struct.pack("<d", value)


def _float_field(number: int, value: float) -> bytes:
    return _key(number, 5) + struct.pack("<f", value)


def _int_field(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(int(value))


def _packed_doubles(number: int, values) -> bytes:
    return _bytes_field(number, b"".join(struct.pack("<d", float(v)) for v in values))


def _event(wall_time: float, step: int | None = None, summary: bytes | None = None, file_version: str | None = None):
    """Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5 (Summary)."""
    data = _double_field(1, wall_time)
    if step is not None:
        data += _int_field(2, step)
    if file_version is not None:
        data += _bytes_field(3, file_version.encode())
    if summary is not None:
        data += _bytes_field(5, summary)
    return data


def _scalar_value(tag: str, value: float) -> bytes:
    """Summary.Value: tag = 1, simple_value = 2 (float)."""
    return _bytes_field(1, tag.encode()) + _float_field(2, value)


def _histogram_value(tag: str, values: np.ndarray, bins) -> bytes:
    """Summary.Value with histo = 5: HistogramProto min = 1, max = 2, num = 3, sum = 4, sum_squares = 5 (doubles),
    bucket_limit = 6, bucket = 7 (packed doubles; each bucket counts the values up to its limit)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    counts, edges = np.histogram(values, bins=bins)
    histo = (_double_field(1, values.min()) + _double_field(2, values.max()) + _double_field(3, values.size)
             + _double_field(4, values.sum()) + _double_field(5, float((values * values).sum()))
             + _packed_doubles(6, edges[1:]) + _packed_doubles(7, counts))
    return _bytes_field(1, tag.encode()) + _bytes_field(5, histo)


def _text_value(tag: str, text: str) -> bytes:
    """Summary.Value with metadata = 9 (plugin "text") and tensor = 8: a 0-d string tensor (TensorProto dtype = 1
    DT_STRING = 7, tensor_shape = 2 (empty), string_val = 8)."""
    metadata = _bytes_field(1, _bytes_field(1, b"text"))            # SummaryMetadata.plugin_data.plugin_name
    tensor = _int_field(1, 7) + _bytes_field(2, b"") + _bytes_field(8, text.encode())
    return _bytes_field(1, tag.encode()) + _bytes_field(9, metadata) + _bytes_field(8, tensor)


def _number(value) -> float:
    """A Python number, a NumPy scalar or a one-element tensor (read back to the host)."""
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


class _EventFile:
    def __init__(self, log_dir: str, suffix: str = ""):
        os.makedirs(log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{id(self) % 1000}{suffix}"
        self.path = os.path.join(log_dir, name)
        self._file = open(self.path, "wb")
        self.write(_event(time.time(), file_version="brain.Event:2"))

    def write(self, data: bytes):
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", _masked_crc(header)) + data + struct.pack("<I", _masked_crc(data)))

    def flush(self):
        self._file.flush()

    def close(self):
        if not self._file.closed:
            self._file.close()


class SummaryWriter:
    """torch.utils.tensorboard.SummaryWriter(log_dir=None, comment='', purge_step=None, max_queue=10,
    flush_secs=120, filename_suffix=''): event files under log_dir (default runs/<date>_<host><comment>).
    Written: add_scalar, add_scalars, add_histogram, add_text; flush, close, and the context manager. The rest of
    torch's methods (add_image(s), add_figure, add_graph, add_embedding, add_audio, add_hparams, add_pr_curve, ...)
    warn once that minidl does not write them, and return."""

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self._suffix = filename_suffix
        self._file = _EventFile(self.log_dir, filename_suffix)
        self._children: dict = {}
        self._warned: set = set()

    def get_logdir(self):
        return self.log_dir

    def _write(self, value: bytes, global_step, walltime, file=None):
        step = None if global_step is None else int(_number(global_step))
        (file or self._file).write(_event(time.time() if walltime is None else float(walltime), step,
                                          summary=_bytes_field(1, value)))

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False, double_precision=False):
        self._write(_scalar_value(tag, _number(scalar_value)), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """One run per key, as torch: log_dir/<main_tag>_<key>/, each holding the scalar under main_tag."""
        for key, value in tag_scalar_dict.items():
            run = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{key}")
            if run not in self._children:
                self._children[run] = _EventFile(run, self._suffix)
            self._write(_scalar_value(main_tag, _number(value)), global_step, walltime, self._children[run])

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        data = values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)
        if bins == "tensorflow":
            bins = 30 if max_bins is None else max_bins
        self._write(_histogram_value(tag, data, bins), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        self._write(_text_value(tag, str(text_string)), global_step, walltime)

    def flush(self):
        self._file.flush()
        for child in self._children.values():
            child.flush()

    def close(self):
        self._file.close()
        for child in self._children.values():
            child.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        if name.startswith("add_"):
            def not_written(*args, **kwargs):
                if name not in self._warned:
                    self._warned.add(name)
                    warnings.warn(f"SummaryWriter.{name}: minidl's writer does not write this kind of summary "
                                  "(it writes scalars, histograms and text); the call does nothing", stacklevel=2)
            return not_written
        raise AttributeError(f"'SummaryWriter' object has no attribute {name!r}")
