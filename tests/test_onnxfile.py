"""read_onnx refuses what onnx.load would hang on, misread, or follow outside the model's folder."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from onnxdoctor.onnxkit.files import OnnxFileError, check_external_data, read_onnx, safe_text


def _relu_model(node_name: str = "relu") -> onnx.ModelProto:
    node = helper.make_node("Relu", ["x"], ["y"], name=node_name)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _external_model(location: str, offset: int = 0, length: int = 16) -> onnx.ModelProto:
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _code(path: Path, **kwargs: bool) -> str:
    with pytest.raises(OnnxFileError) as info:
        read_onnx(path, **kwargs)
    assert "\n" not in info.value.message
    return info.value.code


def test_valid_model_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_relu_model(), path)
    model = read_onnx(path)
    assert [n.op_type for n in model.graph.node] == ["Relu"]


def test_missing_file_is_OD101(tmp_path: Path) -> None:
    assert _code(tmp_path / "nope.onnx") == "OD101"


@pytest.mark.parametrize(
    "content",
    [b"", os.urandom(997), b"\x08\x07\x12\x05hello\x3a\xff\xff\xff"],
    ids=["empty", "random", "truncated-header"],
)
def test_unparseable_bytes_are_OD110(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    assert _code(path) == "OD110"


def test_truncated_model_is_OD110(tmp_path: Path) -> None:
    data = _relu_model().SerializeToString()
    path = tmp_path / "t.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert _code(path) == "OD110"


def test_bare_graphproto_is_not_a_model(tmp_path: Path) -> None:
    # onnx.load accepts this and returns an empty ModelProto; we must not.
    path = tmp_path / "graph.onnx"
    path.write_bytes(_relu_model().graph.SerializeToString())
    assert onnx.load(str(path)).ir_version == 0  # the hazard is real
    with pytest.raises(OnnxFileError, match="not an ONNX model") as info:
        read_onnx(path)
    assert info.value.code == "OD110"


def test_model_without_opset_import_is_read_for_the_checker(tmp_path: Path) -> None:
    model = _relu_model()
    del model.opset_import[:]
    path = tmp_path / "noopset.onnx"
    path.write_bytes(model.SerializeToString())
    assert len(read_onnx(path).graph.node) == 1


def test_directory_and_devices_are_refused_without_reading(tmp_path: Path) -> None:
    assert _code(tmp_path) == "OD110"
    link = tmp_path / "zero.onnx"
    link.symlink_to("/dev/zero")
    assert _code(link) == "OD110"


def test_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    result: list[str] = []

    def read() -> None:
        try:
            read_onnx(fifo)
        except OnnxFileError as exc:
            result.append(exc.code)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert result == ["OD110"], "read_onnx blocked on a FIFO or did not refuse it"


def test_protobuf_nesting_limit_is_one_line(tmp_path: Path) -> None:
    # Build a ModelProto whose graph nests NodeProto->AttributeProto->GraphProto 40 times
    # (120 message levels): protobuf refuses more than 100, so no helper can even build it.
    def field(number: int, payload: bytes) -> bytes:
        length = len(payload)
        varint = bytearray()
        while True:
            byte = length & 0x7F
            length >>= 7
            varint.append(byte | (0x80 if length else 0))
            if not length:
                break
        return bytes([number << 3 | 2]) + bytes(varint) + payload

    graph = b""
    for _ in range(40):
        attribute = field(1, b"then_branch") + field(6, graph) + bytes([20 << 3, 5])
        node = field(4, b"If") + field(5, attribute)
        graph = field(1, node)
    model = bytes([1 << 3, 8]) + field(7, graph) + field(8, bytes([2 << 3, 17]))
    path = tmp_path / "deep.onnx"
    path.write_bytes(model)
    with pytest.raises(OnnxFileError, match="deeper than protobuf") as info:
        read_onnx(path)
    assert info.value.code == "OD110"


def test_non_utf8_names_become_text_consistently(tmp_path: Path) -> None:
    data = _relu_model("NAMEXXXX").SerializeToString().replace(b"NAMEXXXX", b"NAME\xff\xfeXX")
    path = tmp_path / "u.onnx"
    path.write_bytes(data)
    assert isinstance(onnx.load(str(path)).graph.node[0].name, bytes)  # the hazard is real
    model = read_onnx(path)
    assert model.graph.node[0].name == "NAME\\xff\\xfeXX"
    assert safe_text(b"a\xffb") == "a\\xffb"


@pytest.fixture()
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(bytes(64))
    (tmp_path / "secret.bin").write_bytes(bytes(64))
    return folder


def _save(folder: Path, name: str, model: onnx.ModelProto) -> Path:
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_inside_folder_loads_only_when_asked(model_dir: Path) -> None:
    path = _save(model_dir, "ok.onnx", _external_model("w.bin"))
    lazy = read_onnx(path)
    assert lazy.graph.initializer[0].data_location == TensorProto.EXTERNAL
    loaded = read_onnx(path, load_external_data=True)
    assert len(loaded.graph.initializer[0].raw_data) == 16


def test_missing_external_data_does_not_stop_drawing(model_dir: Path) -> None:
    path = _save(model_dir, "missing.onnx", _external_model("nope.bin"))
    read_onnx(path)  # drawing never reads weights
    assert _code(path, load_external_data=True) == "OD112"


@pytest.mark.parametrize(
    "location, code",
    [
        ("../secret.bin", "OD111"),
        ("sub/../../secret.bin", "OD111"),
        ("link.bin", "OD111"),
        ("linkdir/secret.bin", "OD111"),
        ("hard.bin", "OD111"),
        ("ABSOLUTE", "OD111"),
        (".", "OD112"),
    ],
)
def test_external_data_escapes_are_refused(model_dir: Path, location: str, code: str) -> None:
    outside = model_dir.parent / "secret.bin"
    (model_dir / "link.bin").symlink_to(outside)
    (model_dir / "linkdir").symlink_to(model_dir.parent)
    os.link(outside, model_dir / "hard.bin")
    if location == "ABSOLUTE":
        location = str(outside)
    path = _save(model_dir, "bad.onnx", _external_model(location))
    assert _code(path, load_external_data=True) == code
    problems = check_external_data(read_onnx(path), model_dir)
    assert [p.code for p in problems] == [code]


@pytest.mark.parametrize("offset, length", [(60, 16), (100, 4)])
def test_external_data_out_of_range_is_OD112(model_dir: Path, offset: int, length: int) -> None:
    path = _save(model_dir, "range.onnx", _external_model("w.bin", offset, length))
    with pytest.raises(OnnxFileError, match="end of the file") as info:
        read_onnx(path, load_external_data=True)
    assert info.value.code == "OD112"


def test_negative_offset_is_OD112(model_dir: Path) -> None:
    path = _save(model_dir, "neg.onnx", _external_model("w.bin", -4, 4))
    assert _code(path, load_external_data=True) == "OD112"
