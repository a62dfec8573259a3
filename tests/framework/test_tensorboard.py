"""minidl.utils.tensorboard.SummaryWriter (torch.utils.tensorboard's): its event files read back record by record
(TFRecord framing, masked CRC-32C of each length and payload, the Event protobuf fields) by the small decoder below.
The same files were read by TensorBoard 2.21's own EventAccumulator once, by hand (scalars, add_scalars' runs, the
histogram and the text came back); TensorBoard is not a dependency of minidl or of these tests."""
import struct

import numpy as np
import pytest

import minidl
from minidl.utils.tensorboard import SummaryWriter, crc32c


def _fields(data):
    """{field number: [values]} of one protobuf message: varints as ints, 64/32-bit as bytes, messages as bytes."""
    out, i = {}, 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        out.setdefault(number, []).append(value)
    return out


def _varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7


def _masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _records(path):
    raw, i, out = path.read_bytes(), 0, []
    while i < len(raw):
        header = raw[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", raw[i + 8:i + 12])[0] == _masked(header)
        data = raw[i + 12:i + 12 + n]
        assert struct.unpack("<I", raw[i + 12 + n:i + 16 + n])[0] == _masked(data)
        out.append(_fields(data))
        i += 16 + n
    return out


def _scalars(records):
    found = []
    for event in records[1:]:
        value = _fields(_fields(event[5][0])[1][0])
        if 2 in value:
            found.append((value[1][0].decode(), event[2][0], struct.unpack("<f", value[2][0])[0]))
    return found


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283 and crc32c(b"") == 0


def test_summary_writer_writes_event_files_tensorboard_reads(tmp_path):
    with SummaryWriter(tmp_path / "run") as w:
        for step in range(3):
            w.add_scalar("loss/train", 1.0 / (step + 1), step)
        w.add_scalar("lr", minidl.tensor(0.5), global_step=minidl.tensor(7))
        w.add_scalars("acc", {"train": 0.9, "val": 0.8}, 3)
        w.add_histogram("w", minidl.randn(100), 2)
        w.add_text("note", "hello", 1)
        with pytest.warns(UserWarning, match="add_image: minidl's writer does not write"):
            w.add_image("img", np.zeros((3, 4, 4)))
        w.add_image("img", np.zeros((3, 4, 4)))   # (warned once)
    (main,) = (tmp_path / "run").glob("events.out.tfevents.*")
    records = _records(main)
    assert records[0][3] == [b"brain.Event:2"]
    assert _scalars(records) == [("loss/train", 0, 1.0), ("loss/train", 1, 0.5),
                                 ("loss/train", 2, pytest.approx(1 / 3)), ("lr", 7, 0.5)]
    histo = _fields(_fields(_fields(records[5][5][0])[1][0])[5][0])
    assert struct.unpack("<d", histo[3][0])[0] == 100.0 and len(histo[7][0]) == 30 * 8   # num, 30 bucket counts
    text = _fields(_fields(records[6][5][0])[1][0])
    assert _fields(text[8][0])[8] == [b"hello"] and b"text" in text[9][0]
    for key, value in (("train", 0.9), ("val", 0.8)):
        (path,) = (tmp_path / "run" / f"acc_{key}").glob("events.out.tfevents.*")
        assert _scalars(_records(path)) == [("acc", 3, pytest.approx(value))]


def test_default_log_dir_and_runner_mapping(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_lr0.1")
    w.close()
    assert w.get_logdir().startswith("runs") and w.get_logdir().endswith("_lr0.1")
    import minidl.run

    assert minidl.run.TORCH_MODULES["torch.utils.tensorboard"] == "minidl.utils.tensorboard"
