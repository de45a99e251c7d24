"""Read ONNX files safely: regular files only, bounded size, real models, vetted external data.

The raw libraries do not protect against several inputs (README, "Robustness"): `onnx.load` blocks forever on
a FIFO and reads `/dev/zero` until memory runs out; an empty file or a bare GraphProto "loads" as
an empty ModelProto; names that are not valid UTF-8 come back as `bytes`; and external data is only
contained to the model's folder when it is loaded with that folder as base. Every reader of an
ONNX file in onnxdoctor goes through `read_onnx`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onnxdoctor.errors import CodedError
from onnxdoctor.onnxkit.walk import node_bodies, safe_text  # safe_text: re-exported (__all__)

if TYPE_CHECKING:
    import onnx

# Protobuf cannot parse a message of 2 GiB or more; anything that large needs external data.
MAX_MODEL_BYTES = 2**31 - 1

__all__ = [
    "MAX_MODEL_BYTES",
    "ExternalRef",
    "OnnxFileError",
    "check_external_data",
    "external_refs",
    "iter_tensors",
    "load_external_weights",
    "read_onnx",
    "safe_text",
]


class OnnxFileError(CodedError):
    """An ONNX file that cannot be used, with the code that names why.

    Attributes:
        code: "OD101" not found, "OD110" not a valid model file, "OD111" external data escapes
            the model's folder, "OD112" external data missing or out of range.
        message: one line, free of absolute paths where the path is not the user's own argument.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def read_onnx(
    path: str | Path, *, load_external_data: bool = False, allow_missing_ir: bool = False
) -> onnx.ModelProto:
    """Read an ONNX model file without the hazards of a plain `onnx.load`.

    The file must be a regular file (a FIFO or a device is refused without being opened for a
    blocking read) of 1 byte to 2 GiB, must parse as a ModelProto, and must look like a model
    (an IR version and a graph). Names that are not valid UTF-8 are replaced, the
    same way everywhere, by their backslash-escaped text so that every consumer gets `str`.

    Args:
        path: the .onnx file.
        load_external_data: also read the weights stored in external files. They must lie inside
            the model's folder: no absolute paths, no `..`, no symbolic or hard links, offsets and
            lengths within the file. Drawing and checking never need them; running does.
        allow_missing_ir: accept a model whose only defect is a missing IR version (it can still
            be drawn; the checker and the runtime refuse it).

    Returns:
        The parsed model; with `load_external_data`, every tensor holds its data in memory.

    Raises:
        OnnxFileError: with code OD101, OD110, OD111 or OD112 and a one-line message.
    """
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    shown = str(path)
    data = _read_regular_file(path, shown)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as exc:
        detail = str(exc)
        if "MaxDepth" in detail or "recursion" in detail.lower():
            raise OnnxFileError(
                "OD110",
                f"{shown} nests messages deeper than protobuf's limit of 100 "
                "(about 31 levels of If/Loop/Scan subgraphs); it cannot be parsed",
            ) from None
        raise OnnxFileError(
            "OD110", f"{shown} is not an ONNX model: truncated or not a ModelProto protobuf"
        ) from None
    except (ValueError, RuntimeError) as exc:  # upb reports some corruptions this way
        raise OnnxFileError("OD110", f"{shown} is not an ONNX model: {exc}") from None
    _require_model_shape(model, shown, allow_missing_ir=allow_missing_ir)
    _decode_names(model)
    if load_external_data:
        load_external_weights(model, path.resolve().parent)
    return model


def load_external_weights(model: onnx.ModelProto, model_dir: str | Path) -> None:
    """Read a model's external weights into it, after vetting every reference (see read_onnx).

    Raises:
        OnnxFileError: OD111 when a reference escapes `model_dir`, OD112 when data is missing.
    """
    problems = check_external_data(model, model_dir)
    if problems:
        raise problems[0]
    _load_external(model, str(model_dir))


def _read_regular_file(path: Path, shown: str) -> bytes:
    """Open without blocking, check type and size on the open descriptor, read at most the size."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise OnnxFileError("OD101", f"{shown} does not exist") from None
    except NotADirectoryError:
        raise OnnxFileError("OD101", f"{shown} does not exist (a parent is not a folder)") from None
    except PermissionError:
        raise OnnxFileError("OD110", f"{shown} cannot be read: permission denied") from None
    except OSError as exc:
        raise OnnxFileError("OD110", f"{shown} cannot be read: {exc.strerror}") from None
    _require_regular(st, shown)
    # O_NONBLOCK: if the path was swapped for a FIFO after the stat, open() must not hang.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:
        raise OnnxFileError("OD110", f"{shown} cannot be read: permission denied") from None
    except OSError as exc:
        raise OnnxFileError("OD110", f"{shown} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)  # what we actually opened, not what the name pointed at earlier
        _require_regular(st, shown)
        chunks: list[bytes] = []
        remaining = st.st_size + 1  # one extra byte detects a file that grew past the check
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise OnnxFileError("OD110", f"{shown} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > st.st_size:
        raise OnnxFileError("OD110", f"{shown} changed size while being read")
    return data


def _require_regular(st: os.stat_result, shown: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise OnnxFileError("OD110", f"{shown} is a directory, not an ONNX file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or special file"
        raise OnnxFileError("OD110", f"{shown} is {kind}, not a regular ONNX file")
    if st.st_size == 0:
        raise OnnxFileError("OD110", f"{shown} is empty")
    if st.st_size > MAX_MODEL_BYTES:
        raise OnnxFileError(
            "OD110",
            f"{shown} is {st.st_size / 2**30:.1f} GiB; protobuf cannot parse 2 GiB or more "
            "(save the weights as external data)",
        )


def _require_model_shape(model: onnx.ModelProto, shown: str, *, allow_missing_ir: bool = False) -> None:
    """Refuse protobufs that parse as a ModelProto but are not one (GraphProto, NodeProto, ...).

    A missing opset_import is not refused here: that is a real model with a defect, which the
    CHECK stage reports (and IR versions below 3 have no opset_import at all).
    """
    missing = []
    if model.ir_version <= 0 and not (allow_missing_ir and model.graph.node):
        missing.append("no IR version")
    if not model.HasField("graph"):
        missing.append("no graph")
    if missing:
        raise OnnxFileError(
            "OD110",
            f"{shown} is not an ONNX model ({', '.join(missing)}); "
            "is it a bare GraphProto or another protobuf message?",
        )


def _decode_names(model: onnx.ModelProto) -> None:
    """Replace every bytes-valued name with its escaped text, consistently across references."""
    for field in ("producer_name", "producer_version", "domain", "doc_string"):
        value = getattr(model, field)
        if isinstance(value, bytes):
            setattr(model, field, safe_text(value))
    for opset in model.opset_import:
        if isinstance(opset.domain, bytes):
            opset.domain = safe_text(opset.domain)
    _decode_graph(model.graph)
    for function in model.functions:
        for field in ("name", "domain", "doc_string"):
            value = getattr(function, field)
            if isinstance(value, bytes):
                setattr(function, field, safe_text(value))
        _decode_repeated(function.input)
        _decode_repeated(function.output)
        _decode_nodes(function.node)


def _decode_graph(graph: onnx.GraphProto) -> None:
    if isinstance(graph.name, bytes):
        graph.name = safe_text(graph.name)
    for value_infos in (graph.input, graph.output, graph.value_info):
        for vi in value_infos:
            if isinstance(vi.name, bytes):
                vi.name = safe_text(vi.name)
    for tensor in graph.initializer:
        if isinstance(tensor.name, bytes):
            tensor.name = safe_text(tensor.name)
    for sparse in graph.sparse_initializer:
        if isinstance(sparse.values.name, bytes):
            sparse.values.name = safe_text(sparse.values.name)
    _decode_nodes(graph.node)


def _decode_nodes(nodes: Iterable[onnx.NodeProto]) -> None:
    for node in nodes:
        for field in ("name", "op_type", "domain"):
            value = getattr(node, field)
            if isinstance(value, bytes):
                setattr(node, field, safe_text(value))
        _decode_repeated(node.input)
        _decode_repeated(node.output)
        for attr in node.attribute:
            if isinstance(attr.name, bytes):
                attr.name = safe_text(attr.name)
            if attr.HasField("g"):
                _decode_graph(attr.g)
            for sub in attr.graphs:
                _decode_graph(sub)


def _decode_repeated(names: object) -> None:
    values = list(names)  # type: ignore[call-overload]
    if any(isinstance(v, bytes) for v in values):
        fixed = [safe_text(v) for v in values]
        del names[:]  # type: ignore[attr-defined]
        names.extend(fixed)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ExternalRef:
    """One tensor whose data lives in an external file."""

    tensor: str
    location: str
    offset: int | None
    length: int | None
    # The bytes the tensor's shape and type need; None where that is not fixed (strings).
    expected: int | None = None


def external_refs(model: onnx.ModelProto) -> list[ExternalRef]:
    """List the tensors (initializers and attribute tensors, subgraphs included) stored externally.

    Raises:
        OnnxFileError: OD112 when an offset or length is not a non-negative integer.
    """
    from onnx import TensorProto

    refs = []
    for tensor in iter_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {safe_text(e.key): safe_text(e.value) for e in tensor.external_data}
        name = safe_text(tensor.name)
        refs.append(
            ExternalRef(
                tensor=name,
                location=info.get("location", ""),
                offset=_nonneg_int(info.get("offset"), name, "offset"),
                length=_nonneg_int(info.get("length"), name, "length"),
                expected=_expected_bytes(tensor),
            )
        )
    return refs


def _expected_bytes(tensor: onnx.TensorProto) -> int | None:
    """The raw bytes a tensor of this shape and element type holds (4-bit types packed two to a
    byte); None for strings or a type this onnx does not know."""
    from onnx import TensorProto, helper

    count = 1
    for dim in tensor.dims:
        count *= max(int(dim), 0)
    if tensor.data_type == TensorProto.STRING:
        return None
    packed = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(TensorProto, n)}
    if tensor.data_type in packed:
        return (count + 1) // 2
    try:
        return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return None


def _nonneg_int(text: str | None, tensor: str, key: str) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise OnnxFileError(
            "OD112", f"external data {key} {text[:40]!r} of tensor {tensor!r} is not a byte count"
        )
    return value


def check_external_data(model: onnx.ModelProto, model_dir: str | Path) -> list[OnnxFileError]:
    """Vet every external-data reference without reading any data.

    A reference must be a relative path that stays inside `model_dir` once resolved, must not be
    or pass through a symbolic link, must be a regular file with a single hard link (a second link
    may be a way out of the folder), and its offset and length must lie within the file.

    Args:
        model: a model read with `load_external_data=False`.
        model_dir: the folder the model file lives in (the only base external data may use).

    Returns:
        One OnnxFileError (OD111 escapes, OD112 missing or out of range) per bad reference.
    """
    base = os.path.realpath(model_dir)
    problems: list[OnnxFileError] = []
    try:
        refs = external_refs(model)
    except OnnxFileError as exc:
        return [exc]
    for ref in refs:
        problem = _vet_ref(ref, base)
        if problem is not None:
            problems.append(problem)
    return problems


def _vet_ref(ref: ExternalRef, base: str) -> OnnxFileError | None:
    where = f"external data {ref.location!r} of tensor {ref.tensor!r}"
    if not ref.location:
        return OnnxFileError("OD112", f"tensor {ref.tensor!r} is external but names no location")
    if "\x00" in ref.location:
        return OnnxFileError("OD111", f"{where} holds a NUL byte; refused")
    if os.path.isabs(ref.location) or ref.location.startswith("\\"):
        return OnnxFileError("OD111", f"{where} is an absolute path; refused")
    parts = Path(ref.location).parts
    normalized = os.path.normpath(ref.location)
    if normalized == os.pardir or normalized.startswith(os.pardir + os.sep):
        return OnnxFileError("OD111", f"{where} uses '..' to leave the model's folder; refused")
    # Walk component by component so a symlinked folder is caught as well as a symlinked file.
    current = base
    for part in parts:
        current = os.path.join(current, part)
        if os.path.islink(current):
            return OnnxFileError("OD111", f"{where} goes through a symbolic link; refused")
    full = os.path.join(base, *parts)
    real = os.path.realpath(full)
    if os.path.commonpath([real, base]) != base:
        return OnnxFileError("OD111", f"{where} points outside the model's folder; refused")
    try:
        st = os.stat(full, follow_symlinks=False)
    except FileNotFoundError:
        return OnnxFileError("OD112", f"{where} does not exist next to the model")
    except OSError as exc:
        return OnnxFileError("OD112", f"{where} cannot be read: {exc.strerror}")
    if not stat.S_ISREG(st.st_mode):
        return OnnxFileError("OD112", f"{where} is not a regular file")
    if st.st_nlink > 1:
        return OnnxFileError(
            "OD111",
            f"{where} has {st.st_nlink} hard links and may be a file outside the folder; refused",
        )
    offset = ref.offset or 0
    if offset > st.st_size:
        return OnnxFileError(
            "OD112",
            f"{where}: offset {offset} lies beyond the end of the file ({st.st_size} bytes)",
        )
    if ref.length is not None and offset + ref.length > st.st_size:
        return OnnxFileError(
            "OD112",
            f"{where}: offset {offset} + length {ref.length} runs past the end of the file "
            f"({st.st_size} bytes)",
        )
    held = ref.length if ref.length is not None else st.st_size - offset
    if ref.expected is not None and held != ref.expected:
        # A runtime would fail later with a reshape error that names no file.
        return OnnxFileError(
            "OD112",
            f"{where} holds {held} bytes, but the tensor's shape and type need {ref.expected}",
        )
    return None


def _load_external(model: onnx.ModelProto, model_dir: str) -> None:
    """Let onnx read the data with its own containment checks, and translate its errors."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    try:
        load_external_data_for_model(model, model_dir)
    except onnx.checker.ValidationError as exc:
        text = str(exc)
        code = "OD112" if "not regular file" in text else "OD111"
        raise OnnxFileError(
            code, "onnx refused external data: " + _strip_dir(text, model_dir)
        ) from None
    except (ValueError, OSError) as exc:
        raise OnnxFileError(
            "OD112", "external data could not be read: " + _strip_dir(str(exc), model_dir)
        ) from None


def _strip_dir(text: str, model_dir: str) -> str:
    """Keep messages free of absolute paths: show locations relative to the model's folder."""
    return (
        text.replace(model_dir.rstrip(os.sep) + os.sep, "").replace(model_dir, ".").splitlines()[0]
    )


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Initializers, sparse initializers and tensor attributes of every graph and subgraph."""
    stack = [model.graph]
    for function in model.functions:
        yield from _node_tensors(function.node, stack)
    while stack:
        graph = stack.pop()
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        yield from _node_tensors(graph.node, stack)


def _node_tensors(
    nodes: Iterable[onnx.NodeProto], subgraphs: list[onnx.GraphProto]
) -> Iterator[onnx.TensorProto]:
    for node in nodes:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
        subgraphs.extend(body for _, body in node_bodies(node))
