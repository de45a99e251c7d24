"""The SHAPES stage: the exported model at other input sizes, against eager PyTorch.

Runs after PARITY passed, in the same worker, with the loaded model and the ONNX Runtime session
PARITY used (no second export, no second session). Which sizes: the ones the user gave
(`--shapes`), else the dimensions the script declared dynamic (`dynamic_shapes`, `dynamic_axes`,
a fix's declaration) at values inside their bounds, else every dimension PyTorch itself accepts at
another size (probed in eager first: a dimension eager refuses is not dynamic). The records are
plain data; analysis/shapes.py judges them.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import math
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxdoctor.analysis.normalize import running_node

# How many sizes are checked besides the example's, and how many eager probes may be spent.
SIZE_SETS = 3
MAX_PROBES = 8
# No new eager or ONNX Runtime run starts after this many seconds of the stage (a slow model).
TIME_BUDGET = 20.0
# ONNX Runtime's words for an input whose shape the graph declares otherwise.
_INPUT_REFUSED = re.compile(r"Got invalid dimensions for input|Invalid rank for input")


def check_sizes(
    state: dict[str, Any],
    *,
    atol: float,
    rtol: float,
    explicit: tuple[dict[str, list[int]], ...],
    dynamo: bool,
    declared_extra: tuple[tuple[Any, ...], ...] = (),
    sizes_from_fix: tuple[dict[str, list[int]], ...] = (),
) -> dict[str, Any]:
    """Run the exported model at other sizes and compare each with eager PyTorch.

    `declared_extra`: (input name, dim, dim name, min, max) rows a fix declares on top of the
    script's; `sizes_from_fix`: the size sets the main run checked, which a fix must pass too.
    Returns the stage's facts (never raises for a size that fails: that is a record).
    """
    import torch
    import torch.utils._pytree as pytree

    loaded = state["loaded"]
    session = state["session"]
    leaves, spec = pytree.tree_flatten((loaded.args, loaded.kwargs))
    tensor_positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    inputs = session.get_inputs()
    names = [i.name for i in inputs][: len(tensor_positions)]
    examples = [leaves[p] for p in tensor_positions[: len(names)]]
    example_shapes = {n: list(t.shape) for n, t in zip(names, examples)}
    onnx_dims = {i.name: [d if isinstance(d, int) else (d or "?") for d in i.shape] for i in inputs}
    # What the export was given (a fix's corrected or added declaration included), else the script's.
    export_kwargs = (state.get("export_call") or (None, {}))[1]
    declared = _declared(loaded, names, dynamo, export_kwargs) + [
        {"input": r[0], "dim": r[1], "name": r[2], "min": r[3], "max": r[4]} for r in declared_extra
    ]
    unique: dict[tuple[str, int], dict[str, Any]] = {}
    for row in declared:
        if row["input"] in example_shapes and row["dim"] < len(example_shapes[row["input"]]):
            unique.setdefault((row["input"], row["dim"]), row)
    declared = list(unique.values())
    ranges = _inferred_ranges(state, names) if dynamo else {}
    facts: dict[str, Any] = {
        "example": example_shapes,
        "onnx_inputs": onnx_dims,
        "declared": declared,
        "inferred_ranges": ranges,
        "exporter": "dynamo" if dynamo else "torchscript",
    }

    started = time.monotonic()

    followed: list[str] = []  # the inputs the last call gave a moved size as their value
    last_call: list[tuple[Any, Any]] = []  # the (args, kwargs) the last call ran the model with

    def call(shapes: dict[str, list[int]], seed: int, follow: bool = True,
             timed: bool = True) -> tuple[list[Any], list[Any]]:
        if timed and time.monotonic() - started > TIME_BUDGET:
            facts["stopped"] = f"over the stage's {TIME_BUDGET:g} s budget"
            raise _OutOfTime
        new = list(leaves)
        tensors = []
        generator = torch.Generator().manual_seed(seed)
        moved = _moved_sizes(example_shapes, shapes) if follow else {}
        followed.clear()
        for name, position, example in zip(names, tensor_positions, examples):
            shape = shapes.get(name, list(example.shape))
            tensor = _size_valued(example, shape, moved)
            if tensor is None:
                tensor = _like(example, shape, generator)
            else:
                followed.append(name)
            new[position] = tensor
            tensors.append(tensor)
        args, kwargs = pytree.tree_unflatten(new, spec)
        last_call[:] = [(args, kwargs)]
        model = copy.deepcopy(loaded.model) if getattr(loaded.model, "training", False) else loaded.model
        torch.manual_seed(0)
        with torch.no_grad():
            outputs = model(*args, **kwargs)
        from onnxdoctor.worker.facts import tensor_leaves

        return tensors, tensor_leaves(outputs)

    if sizes_from_fix or explicit:
        origin = "fix" if sizes_from_fix else "explicit"
        sets = [dict(s) for s in (sizes_from_fix or explicit)]
        unknown = sorted({n for s in sets for n in s} - set(example_shapes))
        if unknown:
            facts["unknown_inputs"] = unknown
        sets = [{n: list(v) for n, v in s.items() if n in example_shapes} for s in sets]
    elif declared:
        origin = "declared"
        groups = _declared_groups(declared, example_shapes)
        sets = _size_sets(groups, example_shapes)
        sets.extend(s for s in _skewed(groups, example_shapes) if s not in sets)
    else:
        origin = "probed"
        groups, probes = _probe(example_shapes, call)
        facts["probes"] = probes
        sets = _size_sets(groups, example_shapes)
    facts["origin"] = origin
    facts["sizes"] = []
    facts["eager_refused"] = []
    from onnxdoctor.worker.parity import compare_outputs
    from onnxdoctor.worker.runtime import feeds_for_session, run_session

    strided: list[Group] = []  # the declared groups again at their stride, once tried
    for index, shapes in enumerate(sets):
        full = {n: list(shapes.get(n, example_shapes[n])) for n in names}
        varied = [[n, d] for n in names for d, (a, b) in enumerate(zip(full[n], example_shapes[n])) if a != b]
        # The first set is checked whatever the probes took: on a loaded machine they can spend the
        # budget, and a stage that checked no size would let a fixed-size export pass unseen.
        timed = bool(facts["sizes"])
        try:
            try:
                tensors, expected = call(full, 1000 + index, timed=timed)
            except _OutOfTime:
                raise
            except Exception:
                if not followed:
                    raise
                # A value that only equalled a size (a speaker id of 6 beside 6 tokens), moved,
                # may be what eager refused: the set again with every value drawn as before.
                tensors, expected = call(full, 1000 + index, follow=False, timed=timed)
        except _OutOfTime:
            break
        except Exception as exc:  # PyTorch itself refuses this size: not the export's fault
            facts["eager_refused"].append({"inputs": full, "error": _one_line(exc)})
            if origin == "declared" and index == len(sets) - 1 and not facts["sizes"] and not strided:
                # Eager refused every declared size a step away (a BiFPN whose levels must line up,
                # onnx#4452): the same dims again at multiples of their power-of-two stride.
                strided = _strided(groups, example_shapes)
                sets.extend(s for s in _size_sets(strided, example_shapes) if s not in sets)
            continue
        entry: dict[str, Any] = {"inputs": full, "varied": varied, "status": "passed", "max_abs_diff": None,
                                 "error": None}
        try:
            actual = run_session(session, feeds_for_session(session, tensors))
        except Exception as exc:
            text = _one_line(exc)
            entry["error"] = _runtime_reason(text)
            node = running_node(text)
            if _INPUT_REFUSED.search(text):
                entry.update(status="refused", kind="input")
            elif node:
                entry.update(status="failed", kind="node", op=node.group(1), node=node.group(2))
            else:
                entry.update(status="failed", kind="run")
            facts["sizes"].append(entry)
            continue
        report = compare_outputs(expected, actual, atol, rtol)
        entry["max_abs_diff"] = report.get("max_abs_diff")
        random_outputs = state.get("random_outputs") or set()
        differing = {r["index"] for r in report.get("outputs") or () if r.get("ok") is False}
        if report["code"] == "OD601" and differing and differing <= random_outputs:
            # Outputs that vary from run to run matched at the example only in distribution; one
            # run at each size says nothing more of them, so only their shapes and dtypes are held
            # to PyTorch's here (the outputs that do not vary are compared as numbers).
            entry.update(max_abs_diff=None, compared="shapes and dtypes of the random outputs")
        elif report["code"]:
            entry.update(status="failed", kind="mismatch", error=report["message"][:300])
            if not dynamo and not any(e.get("op") for e in facts["sizes"]):
                entry.update(_diverging_at(state, atol, rtol, last_call[0], started))
        facts["sizes"].append(entry)
    failing = [e for e in facts["sizes"] if e["status"] != "passed"]
    if failing:
        facts["frozen_nodes"] = _frozen_constants(state, example_shapes, failing)
        facts["size_code"] = size_code_lines(loaded.model)
    return facts


# ONNX ops that build a shape from its pieces, between a frozen size and the op that uses it.
_SHAPE_BUILDING = frozenset({"Concat", "Unsqueeze", "Squeeze", "Cast", "Identity", "Mul", "Div", "Add", "Sub"})


def _diverging_at(state: dict[str, Any], atol: float, rtol: float, call: tuple[Any, Any],
                  started: float) -> dict[str, Any]:
    """The node where a TorchScript export first computes otherwise at another size (`op`, `node`:
    a Reshape holding the example's batch, a Resize its output size), searched as PARITY searches
    a difference at other inputs, within what is left of the stage's budget; {} where not found."""
    from onnxdoctor.worker.parity import OutOfTime, first_diverging_traced, time_limit

    left = TIME_BUDGET - (time.monotonic() - started)
    if left < 1:
        return {}
    try:
        with time_limit(left):
            found = first_diverging_traced(state, atol, rtol, at=call)
    except (OutOfTime, Exception):  # best effort: the size is reported either way
        return {}
    if not found or not found.get("node"):
        return {}
    op, node = found.get("op"), found["node"]
    model = state.get("onnx_model")
    if op == "Constant" and model is not None:
        # A constant that differs is a size the trace froze (the example's batch in a shape): the
        # node it reaches through the shape's own arithmetic (the Reshape) is where it acts.
        value = found.get("value")
        for _ in range(6):
            reader = next((n for n in model.graph.node if value in n.input), None)
            if reader is None:
                break
            op, node = reader.op_type, reader.name
            if op not in _SHAPE_BUILDING or not reader.output:
                break
            value = reader.output[0]
    return {"op": op, "node": node, "torch_op": found.get("torch_op")}


class _OutOfTime(Exception):
    """The stage's time budget ran out: no further size is started."""


def _moved_sizes(example: dict[str, list[int]], shapes: dict[str, list[int]]) -> dict[int, int]:
    """Each size of the example that the set moves, to the one size it moves to (a size moved to
    two different ones, or a size of 1, is left out: no value could follow it)."""
    moved: dict[int, set[int]] = {}
    for name, old in example.items():
        for a, b in zip(old, shapes.get(name, old)):
            if a != b:
                moved.setdefault(a, set()).add(b)
    return {a: next(iter(b)) for a, b in moved.items() if len(b) == 1 and a > 1}


def _size_valued(example: Any, shape: list[int], moved: dict[int, int]) -> Any | None:
    """A small integer input that holds a size the set moves (`text_lens`, `max_len`), holding the
    new size; None for any other input.

    Such inputs say how long another input is: drawn at random (or kept), they disagree with the
    new length, and eager PyTorch refuses every other size (FastSpeech2#139: `src_lens` and
    `max_src_len` beside the phonemes).
    """
    import torch

    if example.is_floating_point() or example.is_complex() or example.dtype == torch.bool:
        return None
    if not 0 < example.numel() <= 64:
        return None
    values = set(example.flatten().tolist())
    if len(values) != 1:
        return None
    value = values.pop()
    return torch.full(shape, moved[value], dtype=example.dtype) if value in moved else None


def _like(example: Any, shape: list[int], generator: Any) -> Any:
    """A tensor of `shape` in the example's dtype and value range (token ids stay valid ids)."""
    import torch

    if example.dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if example.is_floating_point() or example.is_complex():
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        return values.to(example.dtype)
    low = int(example.min()) if example.numel() else 0
    high = int(example.max()) + 1 if example.numel() else 1
    return torch.randint(low, max(high, low + 1), shape, generator=generator, dtype=example.dtype)


def _runtime_reason(text: str) -> str:
    """ONNX Runtime's reason without its source path and C++ signature: the node and its words."""
    node = running_node(text)
    reason = text.rsplit("Status Message:", 1)[-1] if "Status Message:" in text else text
    reason = re.sub(r"\S+\.(?:h|cc|cpp):\d+ [\w:~<>]+\(.*?\) ", "", reason)
    reason = re.sub(r"^(?:StageFailed: )?\[ONNXRuntimeError\] : \d+ : \w+ : ", "", reason.strip())
    return (f"{node.group(1)} node {node.group(2)}: " if node else "") + reason[:300]


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return re.sub(r"\s+", " ", text)[:1500]


# ---- which dimensions --------------------------------------------------------------------------


def _declared(loaded: Any, names: list[str], dynamo: bool, export_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """The dimensions declared dynamic in the export, as (input, dim, name, min, max) rows."""
    settings = {**loaded.settings, **{k: export_kwargs[k] for k in ("dynamic_shapes", "dynamic_axes")
                                      if export_kwargs.get(k) is not None}}
    rows: list[dict[str, Any]] = []
    if dynamo and settings.get("dynamic_shapes") is not None:
        spec = settings["dynamic_shapes"]
        with contextlib.suppress(Exception):
            params = list(inspect.signature(loaded.model.forward).parameters)
            if isinstance(spec, dict):
                by_name = {k: v for k, v in spec.items()}
            else:
                by_name = dict(zip(params, spec))
            for key, dims in by_name.items():
                name = _graph_input(key, params, names)
                if name is None:
                    continue
                items = dims.items() if isinstance(dims, dict) else enumerate(dims or ())
                for dim, value in items:
                    if value is None or _static_hint(value):
                        continue  # `Dim.STATIC` declares the dim fixed, as None does
                    rows.append({"input": name, "dim": int(dim), **_dim_bounds(value, f"{name}_{dim}")})
    axes = settings.get("dynamic_axes")
    # (A dynamo script may declare its dims as dynamic_axes, which torch.onnx converts.)
    if isinstance(axes, dict) and not (dynamo and settings.get("dynamic_shapes") is not None):
        for key, dims in axes.items():
            if key not in names:
                continue
            items = dims.items() if isinstance(dims, dict) else ((d, f"{key}_{d}") for d in dims)
            for dim, label in items:
                rows.append({"input": key, "dim": int(dim), "name": str(label), "min": None, "max": None})
    return rows


def _graph_input(parameter: str, params: list[str], names: list[str]) -> str | None:
    """The graph input a forward() parameter became: torch.export renames placeholders (`I` is
    written `i`), so a name the graph lacks is matched case-blind, then by position."""
    if parameter in names:
        return parameter
    folded = [n for n in names if n.lower() == parameter.lower()]
    if len(folded) == 1:
        return folded[0]
    if parameter in params and params.index(parameter) < len(names) and len(params) == len(names):
        return names[params.index(parameter)]
    return None


def _static_hint(value: Any) -> bool:
    """torch.export.Dim.STATIC (a `_DimHint` whose type is STATIC)."""
    kind = getattr(value, "type", None)
    return type(value).__name__ == "_DimHint" and getattr(kind, "name", None) == "STATIC"


def _dim_bounds(value: Any, default: str) -> dict[str, Any]:
    """A torch.export.Dim's name and bounds (AUTO/DYNAMIC/a string: unnamed, unbounded)."""
    name = getattr(value, "__name__", None)
    low, high = getattr(value, "min", None), getattr(value, "max", None)
    if not isinstance(name, str) or name.startswith("Dim."):
        name = value if isinstance(value, str) else default
    bound = (lambda v: int(v) if isinstance(v, int) and abs(v) < 2**62 else None)
    return {"name": str(name), "min": bound(low), "max": bound(high)}


def _inferred_ranges(state: dict[str, Any], names: list[str]) -> dict[str, dict[str, list[Any]]]:
    """What torch.export inferred each input dimension's range to be ({"x": {"0": [2, 2]}})."""
    program = getattr(state.get("onnx_program"), "exported_program", None)
    if program is None:
        return {}
    result: dict[str, dict[str, list[Any]]] = {}
    with contextlib.suppress(Exception):
        user_inputs = list(program.graph_signature.user_inputs)
        ranges = {str(k): v for k, v in program.range_constraints.items()}
        for node in program.graph_module.graph.nodes:
            if node.op != "placeholder" or node.name not in user_inputs or node.name not in names:
                continue
            shape = getattr(node.meta.get("val"), "shape", ())
            dims: dict[str, list[Any]] = {}
            for d, size in enumerate(shape):
                if isinstance(size, int):
                    dims[str(d)] = [size, size]
                elif str(size) in ranges:
                    r = ranges[str(size)]
                    dims[str(d)] = [_bound(r.lower), _bound(r.upper)]
            result[node.name] = dims
    return result


def _bound(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) < 2**62 else None


# members, min, max, and the step between sizes the model takes (a strided network's 32).
Group = tuple[list[tuple[str, int]], int | None, int | None, int]


def _declared_groups(declared: list[dict[str, Any]], example: dict[str, list[int]]) -> list[Group]:
    """Declared dims sharing a name vary together (one Dim used by two inputs)."""
    groups: dict[str, Group] = {}
    for row in declared:
        key = row["name"]
        members, low, high, step = groups.get(key, ([], row["min"], row["max"], 1))
        members.append((row["input"], row["dim"]))
        groups[key] = (members, low, high, step)
    return list(groups.values())


def _probe(example: dict[str, list[int]],
           call: Callable[..., Any]) -> tuple[list[Group], list[dict[str, Any]]]:
    """The dimensions eager PyTorch runs at another size: dims of equal size across inputs are
    tried together (a batch every input shares), then one by one when together they fail."""
    by_value: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for name, shape in example.items():
        for dim, size in enumerate(shape):
            if size >= 1:
                by_value.setdefault((dim != 0, size), []).append((name, dim))
    accepted: list[Group] = []
    probes: list[dict[str, Any]] = []
    candidates = [(later, members, size) for (later, size), members in sorted(by_value.items())]

    def accepts(members: list[tuple[str, int]], size: int, step: int = 1) -> bool:
        shapes = {n: list(s) for n, s in example.items()}
        for name, dim in members:
            shapes[name][dim] = size + step
        probe: dict[str, Any] = {"dims": members, "accepted": False, **({"step": step} if step > 1 else {})}
        try:
            # Until one probe is accepted, whatever the budget: one size set at least is then checked.
            call(shapes, 999, timed=any(p["accepted"] for p in probes))
        except _OutOfTime:
            return False
        except Exception:
            probes.append(probe)
            return False
        probes.append({**probe, "accepted": True})
        return True

    def taken(members: list[tuple[str, int]], size: int, later: bool) -> int | None:
        """The step the dims take a new size at: 1, or for non-batch dims refused one larger (a
        detector downsampling by 32 refuses 1025 pixels), the size's power-of-two stride."""
        if accepts(members, size):
            return 1
        step = _stride_of(size) if later else 1
        if step > 1 and len(probes) < MAX_PROBES and accepts(members, size, step):
            return step
        return None

    for later, members, size in candidates:
        if len(probes) >= MAX_PROBES:
            break
        if (step := taken(members, size, later)) is not None:
            accepted.append((members, 1, None, step))
        elif len(members) > 1:
            for member in members:
                if len(probes) >= MAX_PROBES:
                    break
                if (step := taken([member], size, later)) is not None:
                    accepted.append(([member], 1, None, step))
    return accepted, probes


def _size_sets(groups: list[Group], example: dict[str, list[int]]) -> list[dict[str, list[int]]]:
    """SIZE_SETS sets of sizes: each changes every group at once to a value inside its bounds."""
    if not groups:
        return []
    values: list[list[int]] = []
    for members, low, high, step in groups:
        name, dim = members[0]
        size = example[name][dim]
        picks: list[int] = []
        # Small steps for large dims (an image's 224 becomes 225, 232, 227): the stage stays cheap;
        # multiples of the stride for a strided network's (1024 becomes 1088, 1152, 960).
        steps = (size + 1, 2 * size if size <= 16 else size + 8, size + 3, size - 1, size + 5, 2) if step == 1 else (
            size + step, size + 2 * step, size - step)
        for value in steps:
            if value == size or value < 2 or value in picks:
                continue
            if (low is not None and value < low) or (high is not None and value > high):
                continue
            picks.append(value)
        values.append(picks)
    sets: list[dict[str, list[int]]] = []
    for k in range(SIZE_SETS):
        shapes = {n: list(s) for n, s in example.items()}
        changed = False
        for (members, _low, _high, _step), picks in zip(groups, values):
            if not picks:
                continue
            for name, dim in members:
                shapes[name][dim] = picks[min(k, len(picks) - 1)]
            changed = True
        if changed and shapes not in sets:
            sets.append(shapes)
    return sets


def _skewed(groups: list[Group], example: dict[str, list[int]]) -> list[dict[str, list[int]]]:
    """One more set of declared sizes: each dim moved by its own multiple of its stride.

    _size_sets moves groups of one example size (a square image's height and width) in step, by a
    few pixels, which leaves a strided network's deep sizes where they were: a size frozen there
    (a Reshape that holds at 65x72 and fails at 96x128: mmdeploy#1970) goes unseen."""
    def moved(apart: bool) -> dict[str, list[int]]:
        # Dims of one input and one size move apart (height from width); dims of separate inputs
        # named apart (x_0 beside mask_0) keep moving together, as those usually must.
        seen: dict[tuple[str, int], int] = {}
        shapes = {n: list(s) for n, s in example.items()}
        for members, low, high, _step in groups:
            name, dim = members[0]
            size = example[name][dim]
            offset = seen.get((name, size), 0) if apart else 0
            seen[(name, size)] = offset + 1
            stride = _stride_of(size) if all(d != 0 for _n, d in members) else 0
            value = size + stride * (offset + 1) if stride else size + 1 + offset
            if (low is not None and value < low) or (high is not None and value > high):
                continue
            for member, at in members:
                shapes[member][at] = value
        return shapes

    def too_large(shapes: dict[str, list[int]]) -> bool:
        # Each sample's size (the batch axis moves by one anyway): at most six times the example's.
        return any(math.prod(shapes[n][1:]) > 6 * max(1, math.prod(example[n][1:])) for n in example)

    skewed = moved(apart=True)
    if too_large(skewed):
        skewed = moved(apart=False)  # a volume moved apart grows too far: one stride each
    if too_large(skewed):
        return []
    return [skewed] if skewed != example else []


def _strided(groups: list[Group], example: dict[str, list[int]]) -> list[Group]:
    """The groups whose non-batch dims have a power-of-two stride, each stepped by it; [] where
    none has one (the sizes a step away were all there is to try)."""
    stepped: list[Group] = []
    for members, low, high, _step in groups:
        name, dim = members[0]
        stride = _stride_of(example[name][dim]) if all(d != 0 for _n, d in members) else 0
        stepped.append((members, low, high, stride or 1))
    return stepped if any(group[3] > 1 for group in stepped) else []


def _stride_of(size: int) -> int:
    """The largest power of two dividing `size`, up to 64 (0 below 8): the downsampling a network
    whose input is that size most likely requires its sizes to be a multiple of."""
    step = size & -size
    return min(step, 64) if step >= 8 else 0


# ---- where the size froze ----------------------------------------------------------------------

_SHAPE_OPS = ("Reshape", "Expand", "Slice", "ConstantOfShape", "Tile", "Add", "Mul", "Sub", "Concat", "Range")


def _frozen_constants(state: dict[str, Any], example: dict[str, list[int]],
                      failing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes of shape-handling ops whose constant input holds a varied dim's example size: where
    the trace wrote the example's size instead of computing it (at most a few)."""
    import onnx
    from onnx import numpy_helper

    model = state.get("onnx_model")
    if model is None:
        return []
    sizes = {example[n][d] for e in failing for n, d in e.get("varied", ()) if example[n][d] > 1}
    if not sizes:
        return []
    constants: dict[str, list[int]] = {}
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.INT64 and len(init.dims) <= 1 and not init.external_data:
            with contextlib.suppress(Exception):
                constants[init.name] = [int(v) for v in numpy_helper.to_array(init).reshape(-1)[:8]]
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.t.data_type == onnx.TensorProto.INT64 and len(attribute.t.dims) <= 1:
                    with contextlib.suppress(Exception):
                        constants[node.output[0]] = [int(v) for v in numpy_helper.to_array(attribute.t).reshape(-1)[:8]]
    found: list[dict[str, Any]] = []
    for node in model.graph.node:
        if node.op_type not in _SHAPE_OPS:
            continue
        # The shape, repeats, bounds or other operand: every input but the data (ConstantOfShape's
        # only input is its shape).
        operands = node.input if node.op_type == "ConstantOfShape" else node.input[1:]
        held = [v for name in operands for v in constants.get(name, ()) if v in sizes]
        if held:
            found.append({"node": node.name, "op": node.op_type, "value": held[0]})
        if len(found) >= 4:
            break
    return found


def size_code_lines(model: Any) -> list[dict[str, Any]]:
    """Lines of forward() that turn a size into a Python value or branch on it (the usual ways a
    trace freezes a size): `int(x.shape[0])`, `range(x.size(1))`, `len(x)`, numpy on a size,
    `if x.shape[0] > 2:`. Each as {"source": "file.py:12", "kind": ..., "text": ...}."""
    try:
        forward = type(model).forward
        lines, start = inspect.getsourcelines(forward)
        path = Path(inspect.getsourcefile(forward) or "")
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, AttributeError):
        # A ScriptModule's class has no forward to read (torch's _CachedForward raises
        # AttributeError when asked on the class): no Python lines to point at.
        return []

    def is_size(node: ast.AST) -> bool:
        return any((isinstance(n, ast.Attribute) and n.attr == "shape")
                   or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "size")
                   for n in ast.walk(node))

    # Names bound to a size turned into a Python value (`b = int(x.shape[0])`): a view or reshape
    # that takes one as its first size is the node that then holds the number.
    frozen_names = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                    and n.value.func.id in ("int", "len") for t in n.targets if isinstance(t, ast.Name)}
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    for node in ast.walk(tree):
        kind = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("view", "reshape", "expand") and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id in frozen_names):
            kind = "view"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("int", "float") and node.args and is_size(node.args[0]):
                kind = "int"
            elif node.func.id == "range" and any(is_size(a) for a in node.args):
                kind = "range"
            elif node.func.id == "len" and node.args:
                kind = "len"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in ("np", "numpy", "math") and any(is_size(a) for a in node.args):
            kind = "numpy"
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)) and is_size(node.test):
            kind = "branch"
        if kind is None:
            continue
        line = start + node.lineno - 1
        if line in seen:
            continue
        seen.add(line)
        text = lines[node.lineno - 1].strip() if node.lineno - 1 < len(lines) else ""
        found.append({"source": f"{path.name}:{line}", "kind": kind, "text": text[:200]})
    return sorted(found, key=lambda f: int(f["source"].rsplit(":", 1)[1]))[:6]
