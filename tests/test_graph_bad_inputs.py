"""Bad files give one line and exit 2; defective models are drawn with the defect marked (exit 1).

Most cases run in-process through typer's CliRunner (an unexpected exception shows up as
`result.exception`); a few run the real command in a child process with a time limit, so that a
hang or a traceback on the real entry point fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from graph_models import if_model, model, save, svg_clusters, svg_nodes
from onnx import TensorProto, helper
from typer.testing import CliRunner

from onnxdoctor.cli import app

TIME_LIMIT = 30.0


def _run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in a child process."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "onnxdoctor.cli", "graph", *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT,
        env=env,
        check=False,
    )
    assert time.monotonic() - started < TIME_LIMIT
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    return proc


def _invoke(*args: str | Path) -> Any:
    """In-process; a stray exception (our bug) is not a SystemExit and fails here."""
    started = time.monotonic()
    result = CliRunner().invoke(app, ["graph", *[str(a) for a in args]])
    assert time.monotonic() - started < TIME_LIMIT
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2]) + _varint(len(payload)) + payload


def _too_deep() -> bytes:
    """40 nested If levels (120 protobuf message levels): more than protobuf's limit of 100."""
    graph = b""
    for _ in range(40):
        attribute = _field(1, b"then_branch") + _field(6, graph) + bytes([20 << 3, 5])
        graph = _field(1, _field(4, b"If") + _field(5, attribute))
    return bytes([1 << 3, 8]) + _field(7, graph) + _field(8, bytes([2 << 3, 17]))


def _bad_file(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.onnx"
    good = model([helper.make_node("Relu", ["x"], ["y"])]).SerializeToString()
    if kind == "missing":
        return path
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        content = {
            "empty": b"",
            "truncated": good[: len(good) // 2],
            "random": bytes(range(256)) * 7,
            "graphproto": model([helper.make_node("Relu", ["x"], ["y"])]).graph.SerializeToString(),
            "tensorproto": helper.make_tensor(
                "t", TensorProto.FLOAT, [2], [1.0, 2.0]
            ).SerializeToString(),
            "too-deep": _too_deep(),
        }[kind]
        path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "kind, needle",
    [
        ("missing", "does not exist"),
        ("empty", "is empty"),
        ("truncated", "not an ONNX model"),
        ("random", "not an ONNX model"),
        ("graphproto", "not an ONNX model"),
        ("tensorproto", "not an ONNX model"),
        ("directory", "is a directory"),
        ("fifo", "FIFO"),
        ("dev-zero", "device"),
        ("too-deep", "deeper than protobuf's limit"),
    ],
)
def test_bad_file_is_one_line_exit_2(tmp_path: Path, kind: str, needle: str) -> None:
    path = _bad_file(kind, tmp_path)
    if kind in ("fifo", "random"):  # the real process: must not block, must not trace back
        proc = _run(path, "-o", tmp_path / "out.svg")
        code, stderr = proc.returncode, proc.stderr
    else:
        result = _invoke(path, "-o", tmp_path / "out.svg")
        code, stderr = result.exit_code, result.stderr
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxdoctor: error: OD1"), lines
    assert needle in lines[0]
    assert not (tmp_path / "out.svg").exists()


@pytest.mark.parametrize(
    "kind, code, marked",
    [
        ("cycle", "OD306", ["Add", "A", "OD306"]),
        ("duplicate-output", "OD306", ["Relu", "b", "OD306"]),
        ("undefined-input", "OD306", ["Relu", "r", "OD306"]),
        ("missing-domain-import", "OD302", ["mynamespace::MYSELU", "m", "OD302"]),
        ("no-opset-import", "OD399", None),
    ],
)
def test_defective_model_is_drawn_with_the_defect_marked(
    tmp_path: Path, kind: str, code: str, marked: list[str] | None
) -> None:
    nodes = {
        "cycle": [
            helper.make_node("Add", ["x", "b"], ["a"], name="A"),
            helper.make_node("Relu", ["a"], ["b"], name="B"),
            helper.make_node("Relu", ["a"], ["y"], name="C"),
        ],
        "duplicate-output": [
            helper.make_node("Relu", ["x"], ["y"], name="a"),
            helper.make_node("Relu", ["x"], ["y"], name="b"),
        ],
        "undefined-input": [helper.make_node("Relu", ["nowhere"], ["y"], name="r")],
        "missing-domain-import": [
            helper.make_node("MYSELU", ["x"], ["y"], name="m", domain="mynamespace")
        ],
        "no-opset-import": [helper.make_node("Relu", ["x"], ["y"], name="r")],
    }[kind]
    opsets = () if kind == "no-opset-import" else (("", 17),)
    path = save(model(nodes, opsets=opsets), tmp_path / "m.onnx")
    result = _invoke(path)
    assert result.exit_code == 1, result.output
    assert f"{code} error:" in result.stdout
    drawn = svg_nodes(tmp_path / "m.svg")
    if marked is not None:
        assert marked in drawn, drawn
    if kind == "undefined-input":
        assert ["nowhere", "(not defined)"] in drawn


def test_31_nested_if_levels_are_drawn(tmp_path: Path) -> None:
    path = save(if_model(depth=31), tmp_path / "deep.onnx")
    result = _invoke(path, "--dot")  # Graphviz time is not the point here; the builder's is
    assert result.exit_code == 0, result.output
    text = (tmp_path / "deep.dot").read_text()
    assert text.count("subgraph cluster_") == 62
    assert "nodes: 64 (62 inside If/Loop/Scan bodies)" in result.stdout


def test_nested_clusters_render(tmp_path: Path) -> None:
    path = save(if_model(depth=4), tmp_path / "deep.onnx")
    result = _invoke(path)
    assert result.exit_code == 0, result.output
    assert len(svg_clusters(tmp_path / "deep.svg")) == 8


def test_missing_graphviz_is_OD002_and_the_dot_file_is_written(tmp_path: Path) -> None:
    path = save(model([helper.make_node("Relu", ["x"], ["y"], name="r")]), tmp_path / "m.onnx")
    bare = tmp_path / "bin"
    bare.mkdir()  # a PATH with no Graphviz on it (python is called by its full path)
    assert shutil.which("dot", path=str(bare)) is None
    env = {**os.environ, "PATH": str(bare)}
    proc = _run(path, "--png", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "OD002 error: Graphviz `dot` is not on PATH" in proc.stdout
    assert "apt-get install graphviz" in proc.stdout
    assert "render it later with `dot -Tpng m.dot -o m.png`" in proc.stdout
    assert (tmp_path / "m.dot").read_text().startswith("digraph")
    assert not (tmp_path / "m.png").exists()
    again = _run(path, "--png", env=env)  # the .dot is an output too: not overwritten silently
    assert again.returncode == 2 and "m.dot exists" in again.stderr


def test_dot_format_needs_no_graphviz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save(model([helper.make_node("Relu", ["x"], ["y"], name="r")]), tmp_path / "m.onnx")
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    result = _invoke(path, "--dot")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m.dot").exists()


@pytest.mark.parametrize("layout", ["dot", "layered"])
def test_without_system_graphviz_graphviz_pure_draws(tmp_path: Path, layout: str) -> None:
    pure = shutil.which("graphviz-pure") and Path(sys.executable).parent / "graphviz-pure"
    if not pure or not pure.exists():
        pytest.skip("graphviz-pure is not installed (pip install graphviz-pure)")
    path = save(if_model(depth=2), tmp_path / "m.onnx")
    only_pure = tmp_path / "bin"
    only_pure.mkdir()
    (only_pure / "graphviz-pure").symlink_to(pure)
    assert shutil.which("dot", path=str(only_pure)) is None
    env = {**os.environ, "PATH": str(only_pure), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = _run(path, "--svg", "--layout", layout, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OD002" not in proc.stdout
    # The line names what really drew the picture.
    assert "Graphviz dot" not in proc.stdout and "Graphviz neato" not in proc.stdout
    assert "graphviz-pure" in proc.stdout.splitlines()[0]
    labels = [text for node in svg_nodes(tmp_path / "m.svg") for text in node]
    assert "If" in labels and len(svg_clusters(tmp_path / "m.svg")) == 4
    png = _run(path, "--png", "--layout", layout, "-o", tmp_path / "m.png", env=env)
    assert png.returncode == 0, png.stdout + png.stderr
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
