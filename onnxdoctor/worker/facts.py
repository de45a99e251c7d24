"""Plain-data facts about the user's model, its tensors and its dynamic shapes."""

from __future__ import annotations

import contextlib
import itertools
import re
from pathlib import Path
from typing import Any


def corrected_keys(dynamic_shapes: Any, rename: dict[str, str], pack: str, missing: tuple[str, ...]) -> Any:
    """`dynamic_shapes` with its top-level keys made forward()'s: renamed, packed into a `*args`
    tuple (the given keys' specs in their order), and the arguments it left out added as static."""
    if not isinstance(dynamic_shapes, dict):
        return dynamic_shapes
    if pack:
        dynamic_shapes = {pack: tuple(dynamic_shapes.values())}
    corrected = {rename.get(key, key): value for key, value in dynamic_shapes.items()}
    corrected.update({name: None for name in missing if name not in corrected})
    return corrected


def with_suggested_dims(dynamic_shapes: Any, suggestions: Any) -> Any:
    """`dynamic_shapes` refined by torch's own suggestions ("batch = Dim('batch', min=5)", "b = a").

    torch parses its suggestion text itself (the same call torch.onnx makes when it relaxes Dims).
    """
    if not suggestions:
        return dynamic_shapes
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    message = "Suggested fixes:\n" + "".join(f"  {line}\n" for line in suggestions)
    return refine_dynamic_shapes_from_suggested_fixes(message, dynamic_shapes)


def strict_capture(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, dynamic_shapes: Any) -> Any:
    """`torch.export.export(..., strict=True)`; where torch finds the declared Dims' bounds wrong
    for the model (a stride-2 conv needs height >= 3), once more with the Dims it suggests, as
    torch.onnx's own capture does, or with the Dims left to it where it suggests none. The
    result's check at other sizes says what that costs. Floats computed from sizes stay symbolic
    (TorchDynamo's specialize_float off: `math.ceil(n / 4 * 2.0)` is not the example's number),
    and so does a one_hot's class count taken from them."""
    import torch

    with torch._dynamo.config.patch(specialize_float=False), _symbolic_one_hot():
        return _strict_capture(model, args, kwargs, dynamic_shapes)


@contextlib.contextmanager
def _symbolic_one_hot() -> Any:
    """F.one_hot with a symbolic class count computed as a comparison with arange, for a strict
    capture: torch's own asks for the count as an int and fixes it (DeepSpeed's expert capacity,
    `math.ceil(tokens / experts * factor)`, deepspeedai/DeepSpeed#1578)."""
    import torch
    import torch.nn.functional as F

    original = F.one_hot

    def one_hot(tensor: Any, num_classes: Any = -1) -> Any:
        # TorchDynamo traces this function: an isinstance test of a size it holds symbolically
        # is not reliable there, so every given count goes the comparison's way (the same ones,
        # where torch's would raise for a class out of range).
        if isinstance(num_classes, int) and num_classes < 0:
            return original(tensor, num_classes)
        return (tensor.unsqueeze(-1) == torch.arange(num_classes, device=tensor.device)).to(torch.int64)

    F.one_hot = one_hot
    try:
        yield
    finally:
        F.one_hot = original


def _strict_capture(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None, dynamic_shapes: Any) -> Any:
    import torch
    from torch.export import Dim

    try:
        return torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes, strict=True)
    except Exception as exc:
        if "Constraints violated" not in str(exc) or dynamic_shapes is None:
            raise
        refined = None
        if "Suggested fixes:" in str(exc):
            from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

            with contextlib.suppress(Exception):  # torch cannot parse some of its own suggestions
                refined = refine_dynamic_shapes_from_suggested_fixes(str(exc), dynamic_shapes)
        if refined is None:
            # Guards no bound can say (`(h - 1) // 2 + 1 != 1` after a stride-2 conv): each Dim left
            # to torch (Dim.AUTO), which records them instead of refusing the declared range; a dim
            # it then fixes fails the check at other sizes.
            refined = _nested_map(lambda d: Dim.AUTO if isinstance(d, Dim) else d, dynamic_shapes)
        return torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=refined, strict=True)


def _nested_map(fn: Any, value: Any) -> Any:
    """fn applied to every leaf of dicts, tuples and lists."""
    if isinstance(value, dict):
        return {k: _nested_map(fn, v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_nested_map(fn, v) for v in value)
    return fn(value)


def torch_export_verdict(loaded: Any, dynamic_shapes: Any) -> dict[str, Any]:
    """torch.export's own verdict on the user's dynamic_shapes, which torch.onnx relaxes.

    torch.onnx lets the export specialize a Dim, or keep it symbolic while dropping the guard
    the model needs (batch >= 5), without a word: when its first capture raises a UserError about
    the Dims, it retries with torch's suggestions. The same first capture here keeps that error,
    which says which dim breaks what.
    """
    import torch

    try:
        # torch.onnx's own first attempt (its non-strict capture strategy), which it retries with
        # relaxed Dims when torch raises a UserError about them; dims named by a string are
        # Dim.DYNAMIC to it first (torch.export itself refuses a string).
        from torch.onnx import _flags
        from torch.onnx._internal.exporter import _capture_strategies, _dynamic_shapes

        dynamic_shapes, _ = _dynamic_shapes.convert_str_to_export_dim(dynamic_shapes)

        settings = (
            _capture_strategies._patch_dynamic_shape_rnn_decompositions(dynamic_shapes),
            torch.fx.experimental._config.patch(backed_size_oblivious=True),
        )
        deferred = {"prefer_deferred_runtime_asserts_over_guards": _flags.PREFER_DEFERRED_RUNTIME_ASSERTS_OVER_GUARDS}
    except (ImportError, AttributeError):  # another torch: a plain export is the nearest judge
        settings, deferred = (), {}
    try:
        with quiet_torch_logs(), contextlib.ExitStack() as stack:
            for setting in settings:
                stack.enter_context(setting)
            torch.export.export(
                loaded.model, loaded.args, loaded.kwargs or None, dynamic_shapes=dynamic_shapes, strict=False,
                **deferred,
            )
    except torch._dynamo.exc.UserError as exc:  # the Dims are wrong; any other failure is not our verdict
        text = re.sub(r" For more information, run with TORCH_LOGS=\S+", "", str(exc))
        lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
        kept = [ln for ln in lines if "error above occurred" not in ln]
        suggested = [ln.strip() for ln in lines[lines.index("Suggested fixes:") + 1 :]] if "Suggested fixes:" in lines else []
        return {
            "dynamic_shapes_violation": "\n".join(kept[:8])[:1500],
            "dynamic_shapes_suggested": [ln for ln in suggested if re.fullmatch(r"\w+ = .+", ln)][:8],
        }
    except Exception:  # a capture failure torch.onnx got past another way: not about the Dims
        return {}
    return {}


def model_facts(model: Any) -> dict[str, Any]:
    opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    op_types = sorted({(n.domain or "ai.onnx") + "::" + n.op_type for n in model.graph.node})
    return {
        "ir_version": model.ir_version,
        "opset_imports": opsets,
        "written_opset": opsets.get("ai.onnx"),
        "node_count": len(model.graph.node),
        "op_types": op_types,
        "aten_nodes": [n.name for n in model.graph.node if n.op_type == "ATen"][:20],
        "graph_inputs": [i.name for i in model.graph.input],
        "graph_outputs": [o.name for o in model.graph.output],
    }


def model_fingerprint(model: Any, loaded: Any) -> dict[str, str]:
    """What identifies the model a script built: class, tensors' names/shapes/dtypes and values,
    and the example inputs' signature; compared across the fresh imports that verify fixes."""
    import hashlib

    import torch

    digest = hashlib.sha256(type(model).__qualname__.encode())
    count = values = 0
    state = model.state_dict() if isinstance(model, torch.nn.Module) else {}
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        count += 1
        values += tensor.numel()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        try:
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            digest.update(raw.numpy().tobytes())
        except Exception:  # sparse, quantized or meta tensors: their signature has to do
            pass
    for tensor in tensor_leaves((loaded.args, loaded.kwargs)):
        digest.update(f"input:{tuple(tensor.shape)}:{tensor.dtype};".encode())
    summary = f"{type(model).__qualname__}, {count} tensors, {values} values"
    return {"hash": digest.hexdigest()[:32], "summary": summary}


# A model's tensors kept for the fix checks' imports up to this size (bytes): saving costs about
# as much as the bytes, and larger models are the ones scripts seed or load from files anyway.
KEEP_STATE_BYTES = 64 * 2**20


def keep_state(model: Any, fingerprint: str, folder: Any) -> bool:
    """Save the first import's tensors (state_dict) beside the diagnosis, named by its
    fingerprint, for `restore_state`; small models only (KEEP_STATE_BYTES)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return False
    state = model.state_dict()
    size = sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    if size > KEEP_STATE_BYTES:
        return False
    with contextlib.suppress(Exception):
        torch.save(state, Path(folder) / f"state-{fingerprint}.pt")
        return True
    return False


def restore_state(model: Any, fingerprint: str, folder: Any) -> bool:
    """Load the tensors the first import kept (`keep_state`) into a model built again whose
    buffers differ (an uninitialized `torch.empty` buffer): only into the same names, shapes and
    dtypes, and not where a parameter differs (weights drawn without a fixed seed are a script
    that builds another model, OD114)."""
    import torch

    path = Path(folder) / f"state-{fingerprint}.pt"
    if not isinstance(model, torch.nn.Module) or not path.is_file():
        return False
    try:
        saved = torch.load(path, weights_only=True)
        current = model.state_dict()
        if set(saved) != set(current) or any(
                isinstance(t, torch.Tensor) and (t.shape != current[k].shape or t.dtype != current[k].dtype)
                for k, t in saved.items()):
            return False
        parameters = {name for name, _ in model.named_parameters()}
        if any(k in parameters and not torch.equal(t, current[k]) for k, t in saved.items() if isinstance(t, torch.Tensor)):
            return False
        model.load_state_dict(saved, strict=True)
    except Exception:
        return False
    return True


def finding_record(finding: Any) -> dict[str, Any]:
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "message": finding.message,
        "op": finding.op,
        "node": finding.node,
        "opset": finding.opset,
        "evidence": list(finding.evidence),
        "source": finding.source,
    }


# Calls that build a tensor from Python values: sizes read off a shape, put in a tensor, are what
# the symbolic_sizes fix keeps symbolic (Deformable DETR's torch.as_tensor(spatial_shapes)).
_BUILDS_TENSORS = re.compile(r"\b(?:as_tensor|tensor|linspace)\(")


def builds_tensors_from_values(model: Any, script: Any) -> bool:
    """Whether the model's own code (the script and the files in its folder that define the
    model's modules) calls torch.as_tensor, torch.tensor or torch.linspace."""
    import inspect
    from pathlib import Path

    folder = Path(script).resolve().parent
    files = {Path(script).resolve()}
    for module in model.modules() if hasattr(model, "modules") else ():
        with contextlib.suppress(TypeError, OSError):
            source = Path(inspect.getsourcefile(type(module)) or "").resolve()
            if source.parent == folder:
                files.add(source)
    for path in files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if _BUILDS_TENSORS.search(path.read_text("utf-8")):
                return True
    return False


def forward_scopes(model: Any) -> list[dict[str, Any]]:
    """The module globals of the model's forward() and of every submodule class's: where the
    model's code binds the names it calls (`from torch.nn.functional import avg_pool2d`)."""
    classes = [type(model), *(type(m) for m in model.modules())] if hasattr(model, "modules") else [type(model)]
    scopes: dict[int, dict[str, Any]] = {}
    for cls in classes:
        scope = getattr(getattr(cls, "forward", None), "__globals__", None)
        if isinstance(scope, dict):
            scopes.setdefault(id(scope), scope)
    return list(scopes.values())


def uses_flex_attention(model: Any) -> bool:
    """Whether a class of the model's modules calls flex_attention: its module binds the function
    or torch's flex_attention module (recipe.EagerExport.dense_attention)."""
    import sys

    module = sys.modules.get("torch.nn.attention.flex_attention")
    if module is None:
        return False
    function = getattr(module, "flex_attention", None)
    return any(value is function or value is module for scope in forward_scopes(model) for value in scope.values())


def object_inputs(args: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The positional example inputs that are objects holding tensors (loader.tensor_holder), or
    lists, tuples and dicts with such objects inside (a detector's list of per-image objects), or
    are themselves settings of Python values only (loader.settings_object: `settings` true): their
    position and the first such object's class. (A settings object inside a container or passed
    by keyword loads too; the export's refusal then says so, with no wrapper offered.)"""
    from onnxdoctor.worker.loader import settings_object

    found: list[dict[str, Any]] = []
    for i, value in enumerate(args):
        held = _held_object(value)
        if held is not None:
            found.append({"position": i, "class": held})
        elif settings_object(value):
            found.append({"position": i, "class": type(value).__qualname__, "settings": True})
    return found


def _held_object(value: Any, depth: int = 3) -> str | None:
    """The class name of the first tensor-holding object in `value` or its containers."""
    from onnxdoctor.worker.loader import tensor_holder

    if tensor_holder(value):
        return type(value).__qualname__
    if depth == 0 or isinstance(value, str):
        return None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return next((held for item in items if (held := _held_object(item, depth - 1)) is not None), None)


def _classes_matching(model: Any, pattern: re.Pattern[str]) -> list[str]:
    """The model's own classes (not torch's) whose source matches `pattern`, named (at most 20)."""
    import inspect

    classes = [type(model), *(type(m) for m in model.modules())] if hasattr(model, "modules") else [type(model)]
    found: list[str] = []
    for cls in dict.fromkeys(classes):
        if cls.__module__.split(".")[0] == "torch":
            continue
        with contextlib.suppress(TypeError, OSError):
            if pattern.search(inspect.getsource(cls)):
                found.append(cls.__qualname__)
    return found[:20]


_OUTPUT_SIZE = re.compile(r"\boutput_size\s*=")


def sized_transposed_convs(model: Any) -> list[str]:
    """The model's transposed convolutions, named, where the model's own code passes an
    `output_size` (its output_padding is then a number computed from the example's sizes)."""
    import torch

    convs = [name or "(model)" for name, m in model.named_modules()
             if isinstance(m, torch.nn.modules.conv._ConvTransposeNd)] if hasattr(model, "named_modules") else []
    return convs[:20] if convs and _classes_matching(model, _OUTPUT_SIZE) else []


_PACKING = re.compile(r"\b(pack_padded_sequence|pad_packed_sequence|PackedSequence)\b")


def packed_sequences(model: Any) -> list[str]:
    """The model's classes whose code packs or unpacks padded batches (pack_padded_sequence,
    pad_packed_sequence, PackedSequence), named: the TorchScript exporter keeps such code only as
    a pack/unpack pair around one recurrent layer (recipe code in analysis/fixes/packed.py)."""
    return _classes_matching(model, _PACKING)


def input_tree(value: Any, counter: list[int] | None = None) -> Any:
    """The example's structure with each tensor replaced by its position among the tensor leaves
    (in tensor_leaves' order), containers kept (tuples as lists), anything else None."""
    import torch

    counter = [0] if counter is None else counter
    if isinstance(value, torch.Tensor):
        counter[0] += 1
        return counter[0] - 1
    if isinstance(value, (tuple, list)):
        return [input_tree(item, counter) for item in value]
    if isinstance(value, dict):
        return {str(key): input_tree(item, counter) for key, item in value.items()}
    return None


def aliased_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[int]]:
    """Groups of example input tensors (positions among the tensor leaves) that are one tensor.

    torch.export takes a tensor passed in several places for one input: the graph reads it from
    one of them, and at inputs that differ there the export computes something else
    (pytorch/pytorch#139646).
    """
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position, tensor in enumerate(tensor_leaves((args, kwargs))):
        if not tensor.numel():  # empty tensors share no data, whatever their storage pointer says
            continue
        with contextlib.suppress(Exception):  # a tensor without storage (sparse, fake) aliases nothing here
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
            groups.setdefault(key, []).append(position)
    return [group for group in groups.values() if len(group) > 1]


def selecting_index(idx: Any) -> bool:
    """Whether a ModuleList index is a one-element integer tensor (the one kind `selected_modules`
    answers: a style id, a codebook index)."""
    import torch

    return (isinstance(idx, torch.Tensor) and idx.numel() == 1 and not idx.is_floating_point()
            and not idx.is_complex() and idx.dtype is not torch.bool)


def sparse_tensors(model: Any) -> list[str]:
    """The sparse tensors the model's modules hold (parameters, buffers or plain attributes), named.

    The TorchScript exporter stops at such a constant without saying it is sparse ("Unsupported
    value kind: Tensor"), the dynamo one at its storage (recipe.EagerExport.dense_sparse).
    """
    import torch

    def held(name: str, value: Any, depth: int = 0) -> list[tuple[str, Any]]:
        # Tensors in plain lists, tuples and dicts too (DCRNN's `self.supports = [S, S.t()]`), two
        # levels deep and 64 items each (a vocabulary dict is not walked whole).
        if isinstance(value, (list, tuple)) and depth < 2:
            return [pair for n, item in enumerate(itertools.islice(value, 64))
                    for pair in held(f"{name}[{n}]", item, depth + 1)]
        if isinstance(value, dict) and depth < 2:
            return [pair for key, item in itertools.islice(value.items(), 64)
                    for pair in held(f"{name}[{key!r}]", item, depth + 1)]
        return [(name, value)]

    found: list[str] = []
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            values = value.items() if isinstance(value, dict) and name in ("_parameters", "_buffers") else held(name, value)
            for key, tensor in values:
                if isinstance(tensor, torch.Tensor) and tensor.layout is not torch.strided:
                    found.append(f"{prefix}.{key}" if prefix else str(key))
    return found[:20]


def mode_sensitive_modules(model: Any) -> list[str]:
    """Dropout and batch-norm modules that are themselves in training mode, named (all of them).

    A wrapper's own mode says nothing about its children: a train-mode wrapper around an
    `.eval()` model has no module that behaves differently, and is not reported.
    """
    import torch

    kinds = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)
    return [
        f"{name or '<root>'} ({type(module).__name__})"
        for name, module in model.named_modules()
        if isinstance(module, kinds) and module.training
    ]


def tensor_leaves(value: Any) -> list[Any]:
    """The tensors in a nest of tuples, lists and dicts, in order; a numpy array counts as the
    tensor it holds (a forward() that returns `flow.cpu().numpy()` returns data all the same)."""
    import numpy as np
    import torch
    import torch.utils._pytree as pytree

    leaves, _ = pytree.tree_flatten(value)
    found = []
    for leaf in leaves:
        if isinstance(leaf, np.ndarray) and leaf.dtype != object:
            leaf = torch.from_numpy(np.ascontiguousarray(leaf))
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
    return found


def none_leaves(value: Any) -> int:
    """How many outputs PyTorch returns as None (exporters drop them from the graph)."""
    if value is None:
        return 0  # a bare None output is no output at all
    if isinstance(value, (tuple, list)):
        return sum(1 if item is None else none_leaves(item) for item in value)
    if isinstance(value, dict):
        return sum(1 if item is None else none_leaves(item) for item in value.values())
    return 0


def text_output(value: Any, where: str = "the output") -> str | None:
    """Where forward()'s result holds bytes or a string (an entropy coder's bitstream), as
    `the output['strings'][0][0] (bytes)`; None where it holds none."""
    if isinstance(value, (bytes, bytearray, str)):
        return f"{where} ({type(value).__name__})"
    items = (value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (tuple, list)) else ())
    for key, item in items:
        found = text_output(item, f"{where}[{key!r}]")
        if found:
            return found
    return None


def describe_tensor(tensor: Any) -> dict[str, Any]:
    described = {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}
    layout = str(getattr(tensor, "layout", "torch.strided")).replace("torch.", "")
    if layout != "strided":  # a sparse tensor: ONNX has no such input
        described["layout"] = layout
    return described


def jsonable_dim(dim: Any) -> Any:
    return dim if isinstance(dim, int) else str(dim)


def jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else _text(k): jsonable(v) for k, v in value.items()}
    return _text(value)


def _text(value: Any) -> str:
    """repr() of a script's object, or its type's name when its own __repr__ raises."""
    try:
        return repr(value)[:200]
    except Exception:
        return f"<{type(value).__name__} object>"


@contextlib.contextmanager
def quiet_torch_logs() -> Any:
    """Keep torch's export logging out of the user's captured output where torch allows it."""
    import logging

    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


# torch's scalar type names (a traced value's `type().scalarType()`) as dtype names.
_SCALAR_NAMES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
                 "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
                 "Bool": "bool"}


def torch_scalar(value: Any) -> str:
    """torch's spelling of a graph value's element type (`Float`, `ComplexDouble`); "" if none."""
    with contextlib.suppress(Exception):
        return str(value.type().scalarType() or "")
    return ""


def scalar_dtype(value: Any) -> str:
    """A graph value's element type as a dtype name (`float32`); "" for one with no such name."""
    return _SCALAR_NAMES.get(torch_scalar(value), "")


# ONNX's version converter refusing an op: "No Adapter From Version $13 for Resize".
_NO_ADAPTER = re.compile(r"No Adapter (?:From|To) Version \$?(\d+) for (\w+)")
# Protos larger than this are not converted again only to learn why (a copy of the weights).
_CONVERTIBLE_BYTES = 200 << 20


def conversion_refusal(model: Any, opset: int) -> dict[str, Any]:
    """Why ONNX's version converter cannot bring `model` down to `opset`: `conversion_error` (its
    message, one line) and `conversion_op` (the op it has no adapter for), or {} where it can, or
    the model is too large to try."""
    import onnx

    if model.ByteSize() > _CONVERTIBLE_BYTES:
        return {}
    try:
        onnx.version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter's refusal is the fact wanted
        text = " ".join(str(exc).split())[:300]
        adapter = _NO_ADAPTER.search(text)
        return {"conversion_error": text, **({"conversion_op": adapter.group(2)} if adapter else {})}
    return {}
