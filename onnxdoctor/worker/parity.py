"""Compare ONNX Runtime's outputs with PyTorch's: count, shape, dtype, then values.

Also the two comparisons a failing or rewritten run needs: a rewritten .onnx file against its
original (computed another way), and every intermediate value of a dynamo export against
PyTorch's, to name the first node that diverges.
"""

from __future__ import annotations

import contextlib
import math
import signal
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from onnxdoctor.recipe import Reference
from onnxdoctor.worker.facts import quiet_torch_logs
from onnxdoctor.worker.randomness import RANDOM_OPS, draws_random
from onnxdoctor.worker.tracebacks import exception_text


def compare_outputs(torch_outputs: list[Any], ort_outputs: list[Any], atol: float, rtol: float,
                    values_only: bool = False) -> dict[str, Any]:
    """Per-output figures and the first mismatch's code (None when all agree).

    Values agree when |ort - torch| <= atol + rtol * |torch| element-wise (numpy.allclose's rule);
    NaNs agree only with NaNs in the same places. `values_only`: a dtype that differs is not a
    difference by itself (an intermediate value the export keeps as int32 where PyTorch has int64
    holds the same numbers); the numbers are compared.
    """
    rows: list[dict[str, Any]] = []
    code: str | None = None
    message = ""
    if len(torch_outputs) != len(ort_outputs):
        return {
            "code": "OD602",
            "message": f"PyTorch returned {len(torch_outputs)} output tensors, ONNX Runtime {len(ort_outputs)}",
            "outputs": [],
            "max_abs_diff": None,
            "max_rel_diff": None,
        }
    worst_abs = 0.0
    worst_rel = 0.0
    for index, (expected_t, actual) in enumerate(zip(torch_outputs, ort_outputs)):
        expected = _numpy(expected_t)
        actual = np.asarray(actual)
        row: dict[str, Any] = {
            "index": index,
            "torch_shape": list(expected.shape),
            "ort_shape": list(actual.shape),
            "torch_dtype": str(expected.dtype),
            "ort_dtype": str(actual.dtype),
        }
        rows.append(row)
        if expected.shape != actual.shape:
            # A scalar vs a 1-element tensor is the same number: compare values, report shape.
            if expected.size == actual.size == 1:
                actual = actual.reshape(expected.shape)
            else:
                row["ok"] = False
                if code is None:
                    code, message = "OD603", (
                        f"output {index}: shape {tuple(actual.shape)} from ONNX Runtime, "
                        f"{tuple(expected.shape)} from PyTorch"
                    ) + _as_real_pairs(expected, actual, atol, rtol)
                continue
        if values_only and expected.dtype != actual.dtype and expected.dtype.kind in "biuf" and actual.dtype.kind in "biuf":
            expected, actual = expected.astype(np.float64), actual.astype(np.float64)
        if expected.dtype != actual.dtype and not _same_kind_bf16(expected_t, actual):
            row["ok"] = False
            if code is None:
                code, message = "OD604", (
                    f"output {index}: dtype {actual.dtype} from ONNX Runtime, {expected.dtype} from PyTorch"
                )
            continue
        out_atol, out_rtol, widened = _half_tolerance(expected_t, expected, atol, rtol)
        abs_diff, rel_diff, ok = _differences(expected, actual, out_atol, out_rtol)
        row.update(max_abs_diff=abs_diff, max_rel_diff=rel_diff, ok=ok)
        if widened:
            row["tolerance"] = widened
        worst_abs = max(worst_abs, abs_diff)
        worst_rel = max(worst_rel, rel_diff)
        if not ok and code is None:
            code, message = "OD601", (
                f"output {index} differs: max abs error {abs_diff:.3g}, max rel error {rel_diff:.3g} "
                f"(atol {out_atol:.3g}, rtol {out_rtol:g}{'; ' + widened if widened else ''})"
            )
    return {
        "code": code,
        "message": message,
        "outputs": rows,
        "max_abs_diff": worst_abs,
        "max_rel_diff": worst_rel,
    }



def _as_real_pairs(expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> str:
    """What a complex PyTorch output is in the export: ONNX has no complex outputs, and the dynamo
    exporter writes them as (real, imaginary) pairs in a last dim of 2 (torch.view_as_real)."""
    if expected.dtype.kind != "c" or tuple(actual.shape) != (*expected.shape, 2):
        return ""
    pairs = np.stack([expected.real, expected.imag], axis=-1)
    _abs, _rel, ok = _differences(pairs, actual.astype(pairs.dtype), atol, rtol)
    return (f"; PyTorch's is {expected.dtype.name}, which the export holds as (real, imaginary) pairs in a "
            f"last dim of 2: as pairs the values {'agree' if ok else f'differ too (max abs {_abs:.3g})'}")


def compare_prefix(torch_outputs: list[Any], ort_outputs: list[Any], atol: float, rtol: float) -> dict[str, Any]:
    """`compare_outputs` for a loop exported to its last step where PyTorch left it early
    (recipe.PrefixParity): an ONNX output longer than PyTorch's along exactly one dim is compared
    on its first part, PyTorch's length; the report's `prefix` says which outputs were cut."""
    if len(torch_outputs) != len(ort_outputs):
        return compare_outputs(torch_outputs, ort_outputs, atol, rtol)  # OD602, as without the cut
    cuts: dict[int, tuple[int, int, int]] = {}  # output -> (dim, PyTorch's length, ONNX's length)
    for index, (expected_t, actual) in enumerate(zip(torch_outputs, ort_outputs, strict=True)):
        expected, shape = _numpy(expected_t), np.shape(actual)
        differ = [d for d in range(len(shape)) if expected.ndim == len(shape) and shape[d] != expected.shape[d]]
        if len(differ) == 1 and shape[differ[0]] > expected.shape[differ[0]]:
            cuts[index] = (differ[0], expected.shape[differ[0]], shape[differ[0]])
    # One loop ran longer: every cut output has the same two lengths (steps taken, steps run).
    if len({(kept, full) for _dim, kept, full in cuts.values()}) != 1:
        return compare_outputs(torch_outputs, ort_outputs, atol, rtol)
    cut = [np.take(np.asarray(a), np.arange(cuts[i][1]), axis=cuts[i][0]) if i in cuts else a
           for i, a in enumerate(ort_outputs)]
    report = compare_outputs(torch_outputs, cut, atol, rtol)
    for row in report["outputs"]:
        if row["index"] in cuts:
            row["ort_shape"] = list(np.shape(ort_outputs[row["index"]]))  # the real shape, not the cut one
    report["prefix"] = [f"output {i}: PyTorch's {kept} of {full} along dim {dim}" for i, (dim, kept, full) in cuts.items()]
    return report

# Half-precision outputs hold about 3 significant digits (float16's step is 2**-10 of the value,
# bfloat16's 2**-7): an export that rounds once more or sums in another order differs by a few
# steps, which the float32 defaults (atol 1e-4, rtol 1e-3) call a mismatch. The steps are counted
# at each element's own size, with a floor at the output's typical (median) size for elements
# near zero that come out of sums of larger ones; one large element loosens nothing else.
_HALF_STEP = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
HALF_STEPS = 4


def _half_tolerance(expected_t: Any, expected: np.ndarray, atol: float, rtol: float) -> tuple[float, float, str]:
    """The tolerance for one output: the given one, widened for a half-precision output to
    HALF_STEPS of its type's step relative to each element and, as an absolute floor, at the
    output's median magnitude."""
    name = str(getattr(expected_t, "dtype", expected.dtype)).removeprefix("torch.")
    step = _HALF_STEP.get(name)
    if step is None or expected.size == 0:
        return atol, rtol, ""
    values = np.abs(expected.astype(np.float64))
    finite = values[np.isfinite(values)]
    typical = float(np.median(finite)) if finite.size else 0.0
    wide_atol, wide_rtol = max(atol, HALF_STEPS * step * typical), max(rtol, HALF_STEPS * step)
    if (wide_atol, wide_rtol) == (atol, rtol):
        return atol, rtol, ""
    return wide_atol, wide_rtol, f"a {name} output: {HALF_STEPS} of its steps per element, at least at its median size"


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        import torch

        tensor = value.detach().cpu()
        if tensor.layout is not torch.strided:
            tensor = tensor.to_dense()  # a sparse result: the ONNX graph holds it dense
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.numpy()
    return np.asarray(value)


def _same_kind_bf16(expected: Any, actual: np.ndarray) -> bool:
    return "bfloat16" in str(getattr(expected, "dtype", "")) and actual.dtype == np.float32


def _differences(expected: np.ndarray, actual: np.ndarray, atol: float, rtol: float) -> tuple[float, float, bool]:
    if expected.size == 0:
        return 0.0, 0.0, True
    if expected.dtype == np.bool_ or actual.dtype == np.bool_:
        mismatches = float(np.count_nonzero(expected != actual))
        return mismatches, mismatches / expected.size, mismatches == 0
    if np.issubdtype(expected.dtype, np.integer) and np.issubdtype(actual.dtype, np.integer):
        # Integers are identities (indices, counts, hashes): compared in integer arithmetic (a
        # float64 holds int64 values above 2**53 only to the nearest even number or worse) and
        # against the absolute tolerance alone (rtol of a fingerprint of 4e17 would allow 4e14).
        e64, a64 = expected.astype(np.int64), actual.astype(np.int64)
        # The distance as an unsigned number: a signed difference overflows at 2**63 (0 against
        # INT64_MIN, a NaN cast to int64) and would read as agreement.
        eu, au = e64.view(np.uint64), a64.view(np.uint64)
        diff_int = np.where(e64 >= a64, eu - au, au - eu).astype(np.float64)
        nonzero = e64 != 0
        rel = float(np.max(diff_int[nonzero] / np.abs(e64[nonzero].astype(np.float64)))) if np.any(nonzero) else 0.0
        return float(np.max(diff_int)), rel, bool(np.all((e64 == a64) | (diff_int <= atol)))
    e = expected.astype(np.float64)
    a = actual.astype(np.float64)
    nan_e, nan_a = np.isnan(e), np.isnan(a)
    if np.any(nan_e != nan_a):
        return float("inf"), float("inf"), False
    finite = ~nan_e
    e, a = e[finite], a[finite]
    if e.size == 0:
        return 0.0, 0.0, True
    inf_same = np.isinf(e) & (e == a)
    diff = np.where(inf_same, 0.0, np.abs(a - e))
    abs_diff = float(np.max(diff))
    # Relative error only where the reference is not ~0: near-zero denominators give 1e300s.
    significant = np.abs(e) > max(atol, np.finfo(np.float32).eps)
    rel_diff = float(np.max(diff[significant] / np.abs(e[significant]))) if np.any(significant) else 0.0
    ok = bool(np.all(diff <= atol + rtol * np.abs(e)))
    return abs_diff, rel_diff, ok


# onnx.reference runs node by node in numpy: fine for a check, slow for big graphs.
_REFERENCE_EVALUATOR_MAX_NODES = 2000


def compare_with_reference(
    state: dict[str, Any], reference: Reference, feeds: dict[str, Any], atol: float, rtol: float
) -> dict[str, Any]:
    """A rewritten file's outputs against the original model's, computed another way.

    A .onnx target has no PyTorch to compare with. A function expansion is compared with the op
    itself, run by ONNX Runtime at the opset that defines it (only the opset import changes:
    the other ops keep their meaning for a comparison on these inputs); a rewrite of a model
    ONNX Runtime cannot run (a cast around an op without a kernel) with onnx's own reference
    evaluator, on models small enough for it.
    """
    from onnxdoctor.onnxkit.transforms import with_opset_import

    original = state["original_model"]
    try:
        if reference.opset:
            from onnxdoctor.worker.runtime import cpu_session

            opset = reference.opset
            name = f"the original model at opset {opset}"
            session = cpu_session(with_opset_import(original, opset).SerializeToString())
            expected = list(session.run(None, feeds))
        else:
            from onnx.reference import ReferenceEvaluator

            name = "the original model in onnx's reference evaluator"
            if len(original.graph.node) > _REFERENCE_EVALUATOR_MAX_NODES:
                return {"reference": f"not compared: {len(original.graph.node)} nodes is too many for "
                                     "onnx's reference evaluator",
                        "reference_required": reference.required}
            expected = list(ReferenceEvaluator(original).run(None, feeds))
    except Exception as exc:  # ORT and the evaluator raise their own types: any means no reference
        return {"reference": f"not compared: {name} does not run ({exception_text(exc)})",
                "reference_required": reference.required}
    report = compare_outputs(expected, state["ort_outputs"], atol, rtol)
    return {
        "reference": name,
        "max_abs_diff": report["max_abs_diff"],
        "max_rel_diff": report["max_rel_diff"],
        "reference_mismatch": report["message"] or None,
    }


# PyTorch's intermediate values held at once before ONNX Runtime computes theirs: what bounds the
# search's memory on a large model (a small one is compared in one run).
_HELD_BYTES = 256 * 2**20


class _Diverged(Exception):
    """Ends the interpreter's run at the first value that differs."""


def _first_differing_info(state: dict[str, Any], atol: float, rtol: float) -> tuple[Any, int]:
    """The first intermediate value (in FX order) ONNX Runtime computes otherwise than PyTorch,
    and how many values were compared.

    torch's own search (`verify_onnx_program(compare_intermediates=True)`) builds an ONNX Runtime
    session for each value: minutes on a model of a few hundred nodes. Here PyTorch's values are
    collected as the exported program runs, and ONNX Runtime computes a batch of them in one run
    with those values made graph outputs. Making a value an output keeps ONNX Runtime from fusing
    the node that writes it: a difference that only a fused kernel makes is not found here, and
    the output's own node is named (as when only the last node differs)."""
    import onnx
    import torch
    from onnx import numpy_helper
    from torch.onnx._internal.exporter._verification import VerificationInfo

    loaded = state["loaded"]
    program = state["onnx_program"].exported_program
    flat, _spec = program._get_flat_args_with_check(loaded.args, loaded.kwargs or {})
    model = onnx.load(str(state["onnx_path"]))
    outputs = len(model.graph.output)
    computed = {o for n in model.graph.node for o in n.output if o}
    constants = {t.name: t for t in model.graph.initializer}
    pending: list[tuple[str, Any]] = []
    held, compared = 0, 0

    def settle() -> Any:
        nonlocal held, compared
        names = [name for name, _v in pending if name in computed]
        values: dict[str, Any] = {}
        if names:
            values, _feeds = run_exposing(model, names, loaded.args, loaded.kwargs or None)
            del model.graph.output[outputs:]
        for name, expected in pending:
            actual = values[name] if name in values else numpy_helper.to_array(constants[name])
            info = None
            with contextlib.suppress(Exception):  # a value torch's comparison cannot take (a shape, a type)
                info = VerificationInfo.from_tensors(name=name, expected=expected,
                                                     actual=torch.from_numpy(np.array(actual)))
            compared += info is not None
            if info is not None and info.max_abs_diff > atol and info.max_rel_diff > rtol:
                return info
        pending.clear()
        held = 0
        return None

    class Collector(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            nonlocal held
            result = super().run_node(n)
            if n.op == "call_function" and (n.name in computed or n.name in constants):
                if isinstance(result, torch.Tensor):
                    # A copy: a later node of the program may write into a buffer it returned.
                    pending.append((n.name, result.detach().clone()))
                    held += result.numel() * result.element_size()
                elif isinstance(result, int | float | bool):
                    pending.append((n.name, result))
                if held > _HELD_BYTES and (found := settle()) is not None:
                    raise _Diverged(found)
            return result

    try:
        with torch.no_grad():
            Collector(program.module()).run(*flat)
    except _Diverged as stop:
        return stop.args[0], compared
    return settle(), compared


def first_diverging_value(state: dict[str, Any], atol: float, rtol: float) -> dict[str, Any] | None:
    """Compare every intermediate value with PyTorch's (dynamo exports name values after FX nodes)."""
    with quiet_torch_logs(), _nan_aware_comparison():
        try:
            info, compared = _first_differing_info(state, atol, rtol)
        except Exception:  # a value ONNX Runtime cannot hand back (bfloat16): torch's own search
            from torch.onnx import verification

            loaded = state["loaded"]
            infos = verification.verify_onnx_program(
                state["onnx_program"], loaded.args, loaded.kwargs or None, compare_intermediates=True)
            info = next((i for i in infos if i.max_abs_diff > atol and i.max_rel_diff > rtol), None)
            compared = len(infos)
    producers = {out: node for node in state["onnx_model"].graph.node for out in node.output}
    rows = {r.node: r for r in state.get("provenance") or ()}
    if info is None:
        return None
    node = producers.get(info.name)
    row = rows.get(node.name) if node is not None else None
    found = {
        "value": info.name,
        "node": node.name if node is not None else None,
        "op": node.op_type if node is not None else None,
        "max_abs_diff": float(info.max_abs_diff),
        "max_rel_diff": float(info.max_rel_diff),
        "compared": compared,
    }
    if row is not None:  # the FX node it came from (torch's metadata on the node)
        found.update(_row_facts(row))
    if node is None:
        with contextlib.suppress(Exception):
            found.update(_folded(state, info.name))
    drawn = [node.op_type] if node is not None and node.op_type in RANDOM_OPS else []
    if not drawn and row is not None and row.torch_op:
        # A random aten op exported as a draw and more (randint: RandomUniformLike, Mul, Cast): its
        # last node is what is named, and the group's draw must not be held to the reference.
        with contextlib.suppress(Exception):
            drawn = [str(row.torch_op)] if draws_random(str(row.torch_op)) else []
    if drawn:
        found["random"] = drawn
    elif row is not None:
        with contextlib.suppress(Exception):  # best effort: the value is named either way
            found.update(_group_against_reference(state, rows, row, atol, rtol))
    return found


@contextlib.contextmanager
def _nan_aware_comparison() -> Iterator[None]:
    """torch's intermediate-value comparison with NaN and infinities compared as values.

    It takes the largest |expected - actual|: a NaN on either side makes that NaN, which is never
    above a tolerance, so the node where a NaN or an infinity first appears (0/0 after an epsilon
    the optimizer dropped, log of an underflowed sigmoid) was passed over. Here a NaN or infinity
    on one side only is an infinite difference, and the same one on both sides none. Private
    torch API, so best effort: where it has moved the comparison is torch's own."""
    try:
        from torch.onnx._internal.exporter import _verification as internals
    except ImportError:
        yield
        return
    original = getattr(internals, "_compare_tensors", None)
    if original is None:
        yield
        return
    import torch

    def compare(expected: Any, actual: Any) -> Any:
        found = original(expected, actual)
        try:
            e, a = expected.detach().cpu(), actual.detach().cpu()
            if not (e.is_floating_point() and a.is_floating_point()) or e.shape != a.shape:
                return found
            e, a = e.double(), a.double()
            agree = (e == a) | (torch.isnan(e) & torch.isnan(a))
            odd = ~torch.isfinite(e) | ~torch.isfinite(a)
            if not bool(odd.any()):
                return found
            abs_diff = torch.where(agree, torch.zeros_like(e), torch.where(odd, torch.full_like(e, math.inf),
                                                                             (e - a).abs()))
            rel_diff = abs_diff / (e.abs().nan_to_num(posinf=0.0, neginf=0.0) + 1e-7)
            return abs_diff.max().item(), rel_diff.max().item(), abs_diff, rel_diff
        except Exception:
            return found

    internals._compare_tensors = compare
    try:
        yield
    finally:
        internals._compare_tensors = original


# FX ops that move or select values without computing new ones: a folded constant's numbers come
# from the other ops folded into it.
_MOVING = ("view", "reshape", "permute", "transpose", "slice", "select", "unsqueeze", "squeeze", "cat",
           "expand", "clone", "contiguous", "_to_copy", "flatten", "unflatten", "alias", "detach",
           "stack", "split", "split_with_sizes", "t", "index_select", "repeat", "lift_fresh_copy",
           # and ones that make constants of their own
           "zeros", "ones", "full", "new_zeros", "new_ones", "new_full", "empty", "new_empty", "zeros_like",
           "ones_like", "full_like", "empty_like", "scalar_tensor", "arange")


def _folded(state: dict[str, Any], name: str) -> dict[str, Any]:
    """What a differing value with no node in the file is: a constant the exporter computed while
    exporting (from parameters and buffers) and folded in. The FX ops behind it are listed, and
    the one among them that computes numbers (not a view, a slice, a concatenation) is named."""
    program = state["onnx_program"].exported_program
    nodes = {n.name: n for n in program.graph.nodes}
    start = nodes.get(name)
    if start is None or start.op != "call_function":
        return {}
    chain: list[str] = []
    stack, seen = [start], {start.name}
    while stack:
        current = stack.pop()
        chain.append(_fx_op(current.target))
        for parent in current.all_input_nodes:
            if parent.op == "call_function" and parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    computing = [op for op in dict.fromkeys(chain) if op.split("::", 1)[-1].split(".")[0] not in _MOVING]
    found: dict[str, Any] = {"folded": list(dict.fromkeys(chain))[:12], "torch_op": _fx_op(start.target)}
    if len(computing) == 1:
        found["torch_op"] = computing[0]
    return found


def _fx_op(target: Any) -> str:
    """`aten::_upsample_bicubic2d_aa` for torch.ops.aten._upsample_bicubic2d_aa.default."""
    text = str(target)
    namespace, _, rest = text.partition(".")
    return f"{namespace}::{rest.split('.')[0]}" if rest else text


def _group_against_reference(state: dict[str, Any], rows: dict[str, Any], row: Any, atol: float,
                             rtol: float) -> dict[str, Any]:
    """The ONNX nodes exported for the diverging FX node (same torch op, same line), run alone in
    onnx's reference evaluator on ONNX Runtime's values of their inputs (as for TorchScript)."""
    import onnx

    model = state["onnx_model"]
    members = [n for n in model.graph.node if (r := rows.get(n.name)) is not None
               and r.torch_op == row.torch_op and r.source == row.source]
    if not members or len(members) > _GROUP_LIMIT:
        return {}
    fixed = {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
    names = [v for n in members for v in (*n.input, *n.output) if v and v not in fixed]
    # The file, weights included: the dynamo exporter keeps large ones as external data, which a
    # session built from bytes and the reference evaluator cannot reach through the bare graph.
    exposed = onnx.load(str(state["onnx_path"]))
    loaded = state["loaded"]
    values, feeds = run_exposing(exposed, names, loaded.args, loaded.kwargs or None)
    return {"group_ops": [n.op_type for n in members if n.op_type != "Constant"],
            **runtime_against_reference(exposed, members, values, feeds, atol, rtol)}


def output_producer(state: dict[str, Any], report: dict[str, Any]) -> dict[str, Any] | None:
    """The node that writes the first differing output, when no intermediate value was found to
    differ first: every value the search compared agreed, so the difference arises there."""
    model = state.get("onnx_model")
    rows = {r.node: r for r in state.get("provenance") or ()}
    index = next((r["index"] for r in report.get("outputs") or () if r.get("ok") is False), None)
    if model is None or index is None or index >= len(model.graph.output):
        return None
    name = model.graph.output[index].name
    node = next((n for n in model.graph.node if name in n.output), None)
    if node is None:
        return None
    if report.get("code") == "OD604":
        # The type was chosen where it was made, not by the Unsqueeze or Reshape that carries it
        # to the output (a cumsum of int32 lengths kept int32 where torch promotes to int64).
        producers = {out: n for n in model.graph.node for out in n.output}
        seen = {node.name}
        while node.op_type in _MOVES_VALUES and node.input and node.input[0] in producers:
            node = producers[node.input[0]]
            if node.name in seen:
                break
            seen.add(node.name)
            name = node.output[0]
    row = rows.get(node.name)
    # Figures for values that differ; an output of another dtype or shape says so instead.
    numeric = report.get("code") == "OD601"
    found = {"value": name, "node": node.name, "op": node.op_type, "code": report.get("code"), "output": True,
             "max_abs_diff": report.get("max_abs_diff") if numeric else None,
             "max_rel_diff": report.get("max_rel_diff") if numeric else None}
    if row is not None:
        found.update(_row_facts(row))
    if not found.get("torch_op"):
        # Nodes a C++ pass wrote (advanced indexing) have no symbolic call: the trace's own
        # node for that output says which torch op it was.
        with contextlib.suppress(Exception):
            found["torch_op"] = _traced_output_op(state["loaded"], index)
    return found


def _row_facts(row: Any) -> dict[str, Any]:
    """What a provenance row says of a diverging node: its torch op, the user's line, its module."""
    return {"torch_op": row.torch_op, "source": row.source or None, "scope": row.module or None}


def _trace_graph(loaded: Any, at: tuple[tuple[Any, ...], dict[str, Any] | None] | None = None) -> Any:
    """The trace the TorchScript exporter converts, taken again (`torch.jit._get_trace_graph`), at
    the example or at the inputs `at` (args, kwargs)."""
    import torch

    args, kwargs = at if at is not None else (loaded.args, loaded.kwargs)
    with torch.no_grad(), quiet_torch_logs():
        graph, _outputs = torch.jit._get_trace_graph(loaded.model, tuple(args), kwargs or None)
    return graph


def _traced_output_op(loaded: Any, index: int) -> str | None:
    """The aten op of the trace node that computes forward()'s `index`-th output."""
    graph = _trace_graph(loaded)  # held: its nodes and values live only as long as the graph
    values = list(graph.return_node().inputs())
    while len(values) == 1 and values[0].node().kind() == "prim::TupleConstruct":
        values = list(values[0].node().inputs())
    kind = values[index].node().kind() if index < len(values) else ""
    return kind if kind.startswith("aten::") else None


def traced_functions(loaded: Any, target: Any = None) -> list[dict[str, Any]]:
    """The torch.autograd.Functions of the trace that have no `symbolic`: the TorchScript exporter
    inlines the ops their forward ran, so whatever it computed outside PyTorch (numpy, a compiled
    extension's own kernel) is frozen into the graph.

    Each: `function_class` (`module:qualname`), `name`, `inputs` and `outputs` as (dtype, shape)
    pairs from the example's call (dtype "" where it has no name), `arguments` (the call's
    arguments in order: "T" for each tensor, the value of each Python constant, which must be a
    literal: a number, a string, None or a list of them), and `source`, the user's line that
    applies it (in `target`'s folder), where known; `sizes_vary` where another call of it has other
    sizes than the first's.
    """
    from onnxdoctor.worker.tracebacks import torchscript_user_line

    graph = _trace_graph(loaded)
    found: dict[str, dict[str, Any]] = {}
    owners: dict[str, type] = {}
    again: dict[str, list[tuple[Any, Any]]] = {}  # the later calls' (inputs, outputs)
    for node in graph.nodes():
        if node.kind() != "prim::PythonOp":
            continue
        owner = getattr(node.pyobj(), "__self__", None)
        if not isinstance(owner, type) or "symbolic" in vars(owner) or not set(node.cconv()) <= {"d", "c"}:
            continue
        qualname = getattr(owner, "__qualname__", "")
        key = f"{owner.__module__}:{qualname}"
        if key in found:
            # Applied again at other sizes (a voxel encoder's two layers of other widths): the
            # node's sizes are not the first call's everywhere, only its types and ranks.
            with contextlib.suppress(Exception):
                again.setdefault(key, []).append(_typed(node))
            continue
        if "<locals>" in qualname:
            continue
        constants = iter(node.scalar_args())
        arguments = ["T" if kind == "d" else next(constants) for kind in node.cconv()]
        if not all(_literal(argument) for argument in arguments):  # "T" is a literal too
            continue
        with contextlib.suppress(Exception):
            inputs, outputs = _typed(node)
            found[key] = {
                "function_class": key, "name": qualname, "inputs": inputs, "outputs": outputs,
                "arguments": arguments,
                "source": (torchscript_user_line(str(node.sourceRange()), target) or "") if target is not None else "",
            }
            owners[key] = owner
    untyped = [key for key, entry in found.items() if entry["inputs"] is None or entry["outputs"] is None]
    if untyped:
        # The trace left some types unknown (a Function returning a tuple): its call, observed.
        observed = _observed_calls(loaded, [owners[key] for key in untyped])
        for key in untyped:
            if owners[key] in observed:
                found[key]["inputs"], found[key]["outputs"] = observed[owners[key]]
            else:
                del found[key]
    for key, calls in again.items():
        entry = found.get(key)
        # Either side the trace typed in both calls, compared by shape (a data-dependent output
        # is untyped in every call: its inputs tell).
        if entry is not None and any(
                mine is not None and theirs is not None and _shapes(mine) != _shapes(theirs)
                for call in calls for mine, theirs in zip(call, (entry["inputs"], entry["outputs"]))):
            entry["sizes_vary"] = True
    return list(found.values())


def _shapes(typed: list[list[Any]]) -> list[Any]:
    """The shapes of (dtype, shape) pairs."""
    return [shape for _dtype, shape in typed]


def _literal(value: Any) -> bool:
    """Whether a Function's constant argument can be written as a Python literal."""
    if isinstance(value, (list, tuple)):
        return all(_literal(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _typed(node: Any) -> tuple[list[list[Any]] | None, list[list[Any]] | None]:
    """A PythonOp's tensor inputs and outputs as (dtype, shape) from the trace; None for a side
    whose types the trace did not complete."""
    from onnxdoctor.worker.facts import scalar_dtype

    def described(values: list[Any]) -> list[list[Any]] | None:
        try:
            return [[scalar_dtype(v), list(v.type().sizes())] for v in values]
        except Exception:  # a tuple, or a tensor type without sizes
            return None

    return described(list(node.inputs())), described(list(node.outputs()))


@contextlib.contextmanager
def watching_forwards(owners: list[type], around: Callable[[type, tuple[Any, ...], Callable[[], Any]], Any],
                      ) -> Iterator[None]:
    """For the block, each autograd.Function in `owners` runs its forward as `around(owner,
    inputs, run)`: `inputs` are the call's arguments after ctx, `run()` is the forward itself.

    `forward` is watched, not `apply`: a module-level `inplace_abn = InPlaceABN.apply` holds the
    bound apply from before any patch, and apply looks `forward` up on each call. A Function whose
    forward is inherited, or is not a static/class method, is left as it is."""
    patched: list[tuple[type, Any]] = []

    def watched(owner: type, original: Any) -> Any:
        function = original.__func__

        def forward(*args: Any, **kwargs: Any) -> Any:
            inputs = args[2:] if isinstance(original, classmethod) else args[1:]  # after (cls,) ctx
            return around(owner, inputs, lambda: function(*args, **kwargs))
        return type(original)(forward)

    try:
        for owner in owners:
            original = vars(owner).get("forward")
            if isinstance(original, (staticmethod, classmethod)):
                owner.forward = watched(owner, original)  # type: ignore[attr-defined]
                patched.append((owner, original))
        yield
    finally:
        for owner, original in patched:
            owner.forward = original  # type: ignore[attr-defined]


def _observed_calls(loaded: Any, owners: list[type]) -> dict[type, tuple[list[list[Any]], list[list[Any]]]]:
    """Each Function's first call in one eager forward pass: its tensors' (dtype, shape) in and out."""
    import torch

    def described(values: Any) -> list[list[Any]]:
        return [[str(v.dtype).removeprefix("torch."), list(v.shape)] for v in values if isinstance(v, torch.Tensor)]

    seen: dict[type, tuple[list[list[Any]], list[list[Any]]]] = {}

    def record(owner: type, inputs: tuple[Any, ...], run: Callable[[], Any]) -> Any:
        result = run()
        if owner not in seen:
            results = result if isinstance(result, (tuple, list)) else (result,)
            seen[owner] = (described(inputs), described(results))
        return result

    with watching_forwards(owners, record), torch.no_grad():
        loaded.model(*loaded.args, **(loaded.kwargs or {}))
    return seen


# The most nodes one FX node's export is checked against the reference evaluator as a group.
_GROUP_LIMIT = 64


# The TorchScript tracer's warning when it turns a tensor into a Python value (a frozen branch).
FROZEN_TRACE = "might cause the trace to be incorrect"

_DERIVED = "the example's floats "


def derived_input_sets(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """Three input sets derived from the example, each float tensor kept in its own range (and a
    fourth for one-element integer inputs).

    A frozen branch is judged by inputs the model could really get: an image tensor drawn from
    [0, 1] is never fed normal floats (they take branches no real input takes, and their
    outputs can differ for other reasons, e.g. NMS among near-equal scores). Per float tensor,
    with [lo, hi] the example's range:

    - mirrored: negated when the values span zero, else reflected within the range
      (lo + hi - x), so signs, sums and orderings go the other way;
    - shuffled: the example's own values in a seeded random order (the same distribution);
    - constant: everywhere the value of the range nearest zero (zeros when 0 is in the range),
      so `.all()`, `.any()` and thresholds go the other way.

    Integer and bool tensors (indices, lengths, masks), python numbers and float tensors
    holding inf or nan keep their values there. A fourth set, where the example has one-element
    integer tensors, moves each by one (MOVED_SCALARS); its shape differences and ONNX Runtime's
    errors judge nothing.
    """
    import torch

    from onnxdoctor.worker.facts import selecting_index

    generator = torch.Generator().manual_seed(1)

    def mirrored(t: Any) -> Any:
        lo, hi = t.min(), t.max()
        # Rounding can put lo + hi - lo a hair past hi: clamp, so the range holds exactly.
        return -t if lo < 0 < hi else ((lo + hi) - t).clamp(lo, hi)

    def shuffled(t: Any) -> Any:
        order = torch.randperm(t.numel(), generator=generator)
        return t.reshape(-1)[order].reshape(t.shape)

    def constant(t: Any) -> Any:
        return torch.full_like(t, float(torch.clamp(torch.zeros((), dtype=t.dtype), t.min(), t.max())))

    sets = []
    for name, change in (("mirrored", mirrored), ("shuffled", shuffled), ("constant", constant)):
        def derived(value: Any, change: Any = change) -> Any:
            if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()):
                return value
            if not bool(torch.isfinite(value).all()):  # inf/nan mark something: leave them be
                return value
            return change(value.detach()).to(value.dtype)

        sets.append((_DERIVED + name, tuple(_nested(derived, a) for a in args),
                     {k: _nested(derived, v) for k, v in (kwargs or {}).items()}))

    moves: list[Any] = []

    def moved(value: Any) -> Any:
        if not selecting_index(value) or value.dtype is torch.uint8:
            return value
        moves.append(value)
        # The sign kept and 0 avoided (0 often means "none", and 1 "the first"), a step each:
        # 2 -> 1, 1 -> 2, 0 -> 1, -1 -> -2.
        return value + 1 if int(value.reshape(())) in (0, 1) else value - 1

    # An index, a step or an id fed as a one-element integer tensor (Bark's codebook index,
    # ailia-models#1126): the tracer turns it into a Python int without a word when it slices or
    # picks a module, and the float sets above never move it. PyTorch refusing the moved value,
    # ONNX Runtime failing on it and an output of another shape leave the set unjudged
    # (second_input_check): a length moved by one legitimately changes a shape.
    shifted = (tuple(_nested(moved, a) for a in args), {k: _nested(moved, v) for k, v in (kwargs or {}).items()})
    if moves:
        sets.append((MOVED_SCALARS, *shifted))
    return sets


# The fourth derived set's name (derived_input_sets).
MOVED_SCALARS = "the example's integer scalars moved by one"


def _nested(fn: Any, value: Any) -> Any:
    """fn applied to every leaf of tuples, lists and dicts (example inputs may nest)."""
    if isinstance(value, tuple):
        return tuple(_nested(fn, v) for v in value)
    if isinstance(value, list):
        return [_nested(fn, v) for v in value]
    if isinstance(value, dict):
        return {k: _nested(fn, v) for k, v in value.items()}
    return fn(value)


def second_input_check(state: dict[str, Any], atol: float, rtol: float,
                       retrace: Any = None, target: Any = None, derived: bool = True,
                       compare: Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]] | None = None,
                       prefix: bool = False, budget: float = 30.0) -> dict[str, Any]:
    """Run the exported model and PyTorch again at other inputs and compare (a frozen trace).

    The sets: the script's own `get_inputs2()` when it defines one, and the three or four sets
    `derived_input_sets` makes from the example (unless `derived` is false: a run with nothing
    frozen is held to the script's own other inputs only). The export matches only if it matches at every
    set that PyTorch itself accepts. At the first set where it differs, the difference is traced
    to where it first arises (the first submodule whose output differs) and, with `retrace` (a
    function exporting the model traced at given inputs, returning the file), the model is
    traced again at that set: if that export matches there, the recorded branch is the cause;
    if it differs too, the frozen value is not (`frozen_cause` False). `compare(args, kwargs)`,
    where given, judges a set instead of one run of each (outputs that draw random numbers are
    compared in distribution); it returns `compare_outputs`' report. `prefix`: outputs longer
    than PyTorch's are compared on PyTorch's part (recipe.PrefixParity). `budget`: seconds the
    search for where a difference arises may take (--localize-budget, as PARITY's own search).
    """
    import torch

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.runtime import feeds_for_session, run_session

    loaded = state["loaded"]
    own = loaded.namespace.get("get_inputs2")
    sets: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    if callable(own):
        second = own()
        # One tensor is one input (tuple() of a tensor would split it into its rows).
        sets.append(("the script's get_inputs2()", (second,) if isinstance(second, torch.Tensor) else tuple(second), {}))
    if derived:
        sets += derived_input_sets(loaded.args, loaded.kwargs or {})
    session = state["session"]
    worst: float | None = None
    checked: list[str] = []
    refused: list[str] = []
    # Derived sets where PyTorch's own output turns on ties (every topk candidate equal at the
    # constant set): which one a runtime picks is arbitrary there, so they judge nothing.
    tied: list[str] = []
    for source, args, kwargs in sets:
        try:
            with torch.no_grad():
                expected = tensor_leaves(loaded.model(*args, **kwargs))
        except Exception:  # the model refuses these inputs (a length check, sorted lengths ...)
            refused.append(source)
            continue
        try:
            got = run_session(session, feeds_for_session(session, tensor_leaves((args, kwargs))))
        except Exception as exc:  # the runtime's own error types
            if source == MOVED_SCALARS:
                refused.append(source)  # a moved length or count the graph takes otherwise
                continue
            report = {"code": "OD501", "message": f"ONNX Runtime failed: {exception_text(exc)}", "max_abs_diff": None}
        else:
            report = (compare(args, kwargs) if compare is not None else
                      (compare_prefix if prefix else compare_outputs)(expected, got, atol, rtol))
            if source == MOVED_SCALARS and report["code"] not in (None, "OD601"):
                refused.append(source)  # another shape: a length moved by one, not a frozen index
                continue
        if report["code"] == "OD601" and compare is None and not prefix and not _quantized(state):
            # Off by no more than PyTorch's own float32 rounding there (as at the example).
            own = own_rounding(loaded.model, args, kwargs, expected, got, atol, rtol)
            if own is not None and own["passed"]:
                report = {**report, "code": None, "message": ""}
        if report["code"] is not None and source.startswith(_DERIVED) and _turns_on_ties(loaded, args, kwargs, atol, rtol):
            tied.append(source)
            continue
        if report["code"] is not None:
            result = {"source": source, "matched": False, "message": report["message"],
                      "max_abs_diff": report.get("max_abs_diff"), "sets": len(checked) + 1,
                      "matched_at": checked, "refused": refused,
                      # The set's shapes by ONNX input, and the dims where the graph fixed another
                      # size (ONNX Runtime names only the first input it refuses).
                      **_fixed_dims(session, tensor_leaves((args, kwargs)))}
            differing = [row["index"] for row in report.get("outputs") or () if row.get("ok") is False]
            if state.get("onnx_model") is not None and differing:
                # An output no input reaches is a constant the trace baked in whole (the tags a
                # Viterbi decode built in Python lists and `torch.as_tensor` turned into a tensor).
                result["constant_outputs"] = input_free_outputs(state["onnx_model"].graph, differing)
            result.update(_trace_difference(state, atol, rtol, args, kwargs, retrace, target, budget))
            return result
        checked.append(source)
        worst = max(worst or 0.0, report.get("max_abs_diff") or 0.0)
    if not checked:
        return {"source": "no other input set (PyTorch refused every one or its output turned on ties)",
                "matched": False, "message": "PyTorch raised at every derived input set" if not tied else
                "PyTorch raised or its output turned on ties at every other input set",
                "refused": refused, "tied": tied, "sets": 0, "unchecked": True}
    derived = [name.removeprefix(_DERIVED) for name in checked if name.startswith(_DERIVED)]
    parts = [name for name in checked if not name.startswith(_DERIVED)]
    if derived:
        parts.append(_DERIVED + (", ".join(derived[:-1]) + " and " + derived[-1] if len(derived) > 1 else derived[0]))
    described = parts[0] if len(checked) == 1 else f"{len(checked)} input sets: " + "; ".join(parts)
    if tied:
        described += " (not judged: " + ", ".join(name.removeprefix(_DERIVED) for name in tied) + \
            ", where PyTorch's own output turns on ties)"
    return {"source": described, "matched": True, "message": None, "max_abs_diff": worst,
            "sets": len(checked), "refused": refused, "tied": tied}


def input_free_outputs(graph: Any, indices: list[int]) -> list[int]:
    """The graph outputs among `indices` whose value no graph input reaches (made of Constant
    nodes and initializers only; what a node's subgraphs read counts as read by the node)."""
    from onnxdoctor.onnxkit.cut import ancestors, outer_inputs, producers

    inputs = {value.name for value in graph.input}
    made = producers(graph)

    def reaches(name: str) -> bool:
        if name in inputs:
            return True
        if name not in made:
            return False  # an initializer
        return any(read in inputs for index in ancestors(graph, made[name])
                   for read in outer_inputs(graph.node[index]))

    outputs = list(graph.output)
    return [i for i in indices if i < len(outputs) and not reaches(outputs[i].name)]


# How far ONNX Runtime's float32 result may be from PyTorch's float64 one, in multiples of PyTorch's
# own float32 error there; and the largest float32 error, as a share of the output's magnitude, for
# which the float32 result still means something.
OWN_ROUNDING_FACTOR = 2.0
OWN_ROUNDING_MEANINGFUL = 0.01
# Parameters above which the float64 copy is not made (a copy of the model in eight-byte floats).
OWN_ROUNDING_MAX_PARAMETERS = 50_000_000


def own_rounding(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any], torch_outputs: list[Any],
                 ort_outputs: list[Any], atol: float, rtol: float) -> dict[str, Any] | None:
    """Both float32 results measured against PyTorch's float64 run of the same model and inputs.

    An ill-conditioned computation (the inverse of a thin-plate-spline kernel) rounds differently
    in any two float32 implementations: PyTorch's float32 result is itself off its float64 one by
    more than the tolerance. Judged element by element, output by output: each element of ONNX
    Runtime's result may be off the float64 one by OWN_ROUNDING_FACTOR times PyTorch's own float32
    error at that element, plus the tolerance; every output must be float32 (any other dtype must
    already have matched), and PyTorch's error must stay below OWN_ROUNDING_MEANINGFUL of that
    output's largest finite magnitude (beyond it neither result means anything, and the mismatch
    stands). None where there is no float64 run to compare with: an output that is not a dense
    float32 tensor, a model too large to copy, or one that refuses float64 (a tensor built with
    dtype=torch.float32 inside forward()).
    """
    import copy

    import numpy as np
    import torch

    from onnxdoctor.worker.facts import tensor_leaves

    dense = [isinstance(t, torch.Tensor) and t.layout is torch.strided and t.dtype == torch.float32
             for t in torch_outputs]
    if not torch_outputs or not all(dense) or len(ort_outputs) != len(torch_outputs) \
            or not isinstance(model, torch.nn.Module) \
            or sum(p.numel() for p in model.parameters()) > OWN_ROUNDING_MAX_PARAMETERS:
        return None

    def wider(value: Any) -> Any:
        return value.double() if isinstance(value, torch.Tensor) and value.dtype == torch.float32 else value

    default = torch.get_default_dtype()
    try:
        wide = copy.deepcopy(model)
        for key, hook in list(wide._forward_pre_hooks.items()):
            if type(hook).__name__ == "FirstCallHook":
                # The worker's hook puts the float32 state back before each call: not on this copy.
                del wide._forward_pre_hooks[key]
        wide = wide.double()
        args = tuple(_nested(wider, a) for a in args)
        kwargs = {k: _nested(wider, v) for k, v in kwargs.items()}
        # Tensors forward() builds without a dtype (torch.zeros(n)) follow the default.
        torch.set_default_dtype(torch.float64)
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(0)
            reference = tensor_leaves(wide(*args, **kwargs))
        if len(reference) != len(torch_outputs):
            return None
        pytorch_error = runtime_error = 0.0
        passed = True
        for wide_t, ours_t, theirs in zip(reference, torch_outputs, ort_outputs):
            exact = _numpy(wide_t).astype(np.float64)
            ours = _numpy(ours_t).astype(np.float64)
            theirs = np.asarray(theirs, dtype=np.float64)
            if exact.shape != ours.shape or theirs.shape != ours.shape:
                return None
            finite = np.isfinite(exact)
            if not np.array_equal(finite, np.isfinite(ours)) or not np.array_equal(finite, np.isfinite(theirs)):
                passed = False  # an infinity or NaN on one side only is no rounding
                continue
            own = np.abs(ours - exact)[finite]
            off = np.abs(theirs - exact)[finite]
            if not own.size:
                continue
            pytorch_error, runtime_error = max(pytorch_error, float(own.max())), max(runtime_error, float(off.max()))
            allowed = OWN_ROUNDING_FACTOR * own + atol + rtol * np.abs(exact[finite])
            meaningful = float(own.max()) <= OWN_ROUNDING_MEANINGFUL * float(np.abs(exact[finite]).max())
            passed = passed and meaningful and bool(np.all(off <= allowed))
    except Exception:  # a model that refuses float64, an output numpy cannot read: no evidence
        return None
    finally:
        torch.set_default_dtype(default)
    return {"pytorch_error": pytorch_error, "runtime_error": runtime_error, "passed": passed}


def _quantized(state: dict[str, Any]) -> bool:
    """Whether the run checks a model quantized by a fix (compared at quantization's tolerance)."""
    from onnxdoctor.recipe import QuantizeOnnx

    recipe = state.get("recipe")
    return recipe is not None and recipe.first(QuantizeOnnx) is not None


def _turns_on_ties(loaded: Any, args: tuple[Any, ...], kwargs: dict[str, Any], atol: float, rtol: float) -> bool:
    """Whether PyTorch's output at this input set changes when its floats move by a hair.

    Two seeded jitters of 1e-5 of each float tensor's range (of its magnitude where the range is
    zero): outputs that still agree within the tolerance are a well-posed answer, so a difference
    from the export there is real (a frozen `.any()` at the constant set flips the same way for
    both jitters); outputs that differ between the jitters are decided by how ties are broken
    (topk or argmax among equal scores), which PyTorch and a runtime may do otherwise.
    """
    import torch

    from onnxdoctor.worker.facts import tensor_leaves

    def jittered(seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        generator = torch.Generator().manual_seed(seed)

        def move(value: Any) -> Any:
            if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel()):
                return value
            base = value.detach().float()
            scale = float(base.max() - base.min()) or max(float(base.abs().max()), 1.0)
            noise = torch.randn(base.shape, generator=generator) * (scale * 1e-5)
            return (base + noise).to(value.dtype)

        return tuple(_nested(move, a) for a in args), {k: _nested(move, v) for k, v in kwargs.items()}

    outputs = []
    try:
        # Random ops draw the same numbers for both jitters, so only the inputs differ.
        with torch.no_grad(), torch.random.fork_rng():
            for seed in (11, 12):
                a, k = jittered(seed)
                torch.manual_seed(0)
                outputs.append(tensor_leaves(loaded.model(*a, **k)))
    except Exception:  # the model refuses the jittered set: no evidence of ties
        return False
    return compare_outputs(outputs[0], [_numpy(t) for t in outputs[1]], atol, rtol)["code"] is not None


def _fixed_dims(session: Any, tensors: list[Any]) -> dict[str, Any]:
    """{"shapes": {input: shape}, "fixed": [[input, dim, size there, size in the graph], ...]}."""
    shapes: dict[str, list[int]] = {}
    fixed: list[list[Any]] = []
    for declared, tensor in zip(session.get_inputs(), tensors):
        shape = [int(d) for d in getattr(tensor, "shape", ())]
        shapes[declared.name] = shape
        if len(declared.shape) != len(shape):
            continue
        fixed += [[declared.name, dim, size, want] for dim, (size, want) in enumerate(zip(shape, declared.shape))
                  if isinstance(want, int) and want != size]
    return {"shapes": shapes, "fixed": fixed}


def _trace_difference(state: dict[str, Any], atol: float, rtol: float, args: tuple[Any, ...],
                      kwargs: dict[str, Any], retrace: Any, target: Any, budget: float) -> dict[str, Any]:
    """Where a difference at other inputs first arises, and whether the frozen trace causes it."""
    facts: dict[str, Any] = {}
    if state.get("onnx_path") is not None:
        # Both searches run the model piece by piece: on a large model (a fix check of a dynamo
        # export, whose modules all run again) that took minutes, and the check with it.
        searches = (("diverging", lambda: first_diverging_module(state, atol, rtol, target, args, kwargs)),
                    # TorchScript exports: the call, not only the module.
                    ("diverging_call", lambda: first_diverging_traced(state, atol, rtol, at=(args, kwargs))))
        try:
            with time_limit(budget):
                for name, search in searches:
                    try:
                        found = search()
                    except Exception:  # best effort: the difference is reported either way (not OutOfTime)
                        found = None
                    if found is not None:
                        facts[name] = found
        except OutOfTime:
            facts["diverging_skipped"] = f"over the --localize-budget of {budget:g} s"
    if retrace is not None:
        import torch

        from onnxdoctor.worker.facts import tensor_leaves
        from onnxdoctor.worker.runtime import cpu_session, feeds_for_session, run_session

        loaded = state["loaded"]
        try:
            path = retrace(args, kwargs)
            session = cpu_session(str(path))
            with torch.no_grad():
                expected = tensor_leaves(loaded.model(*args, **kwargs))
            got = run_session(session, feeds_for_session(session, tensor_leaves((args, kwargs))))
        except Exception:  # a trace at these inputs failing says nothing about the cause
            return facts
        # Traced at these very inputs, the branch taken is theirs: a match there puts the
        # difference on the recorded branch; a difference there is not the frozen value's doing.
        facts["frozen_cause"] = compare_outputs(expected, got, atol, rtol)["code"] is None
    return facts


class OutOfTime(BaseException):
    """A bounded step ran past its time limit.

    Not an Exception: the searches it bounds run the model and catch what the model raises, and
    one of those `except Exception` blocks would take the one timer signal and run on unbounded.
    """


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise OutOfTime in the worker's main thread once `seconds` have passed (0: at once).

    The intermediate comparison is one library call with no budget of its own; a timer signal
    is the only way to stop it without losing the run.
    """
    if seconds <= 0:
        raise OutOfTime

    def expire(_signum: int, _frame: Any) -> None:
        raise OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_exposing(model: Any, names: list[str], args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the model in ONNX Runtime with intermediate values `names` made graph outputs too.

    Returns every output's value by name, and the feeds given. The model is changed in place.
    """
    import onnx

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.runtime import cpu_session, feeds_for_session

    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in known)
    session = cpu_session(model.SerializeToString())
    feeds = feeds_for_session(session, tensor_leaves((args, kwargs)))
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True)), feeds


def call_outputs(protos: list[Any]) -> list[str]:
    """What the nodes one symbolic call wrote give the rest of the graph: the outputs none of them reads.

    A Constant is left out where the call wrote other nodes: pairing written nodes with their
    calls by kind can give a call a Constant another call's node reads (a folded scale), which
    is no result of this call, and would make its outputs not line up with PyTorch's."""
    computing = [n for n in protos if n.op_type != "Constant"] or protos
    read = {i for n in protos for i in n.input}
    return [o for n in computing for o in n.output if o and o not in read]


def first_diverging_module(state: dict[str, Any], atol: float, rtol: float, target: Any,
                           args: tuple[Any, ...] | None = None,
                           kwargs: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """TorchScript exports: the first submodule whose output the ONNX model computes differently.

    The TorchScript exporter names nodes after the module path that emitted them
    ("/layers.0/act/Erf" is inside `layers.0.act`), so each submodule's output is the value of the
    last node in its scope. Those values become extra graph outputs; forward hooks record
    PyTorch's; submodules are compared in the order they finished (inner ones first).
    """
    from pathlib import Path

    import onnx
    import torch

    from onnxdoctor.worker.facts import tensor_leaves

    model = onnx.load(str(state["onnx_path"]))
    producers = {out: node for node in model.graph.node for out in node.output}
    last: dict[str, str] = {}
    for node in model.graph.node:
        segments = node.name.strip("/").split("/")[:-1] if node.name.startswith("/") else []
        for qualname in scope_names(segments):
            if node.output:
                last[qualname] = node.output[0]
    loaded = state["loaded"]
    if args is None:
        args, kwargs = loaded.args, loaded.kwargs
    seen: list[tuple[str, Any, Any]] = []
    hooks = []
    for name, module in loaded.model.named_modules():
        if name and name in last:
            def record(module: Any, _inputs: Any, output: Any, name: str = name) -> None:
                leaves = tensor_leaves(output)
                if leaves and all(n != name for n, _m, _t in seen):
                    seen.append((name, module, leaves[0].detach().clone()))

            hooks.append(module.register_forward_hook(record))
    try:
        with torch.no_grad():
            loaded.model(*args, **(kwargs or {}))
    finally:
        for hook in hooks:
            hook.remove()
    if not seen:
        return None
    values, _feeds = run_exposing(model, [last[name] for name, _m, _t in seen], args, kwargs)
    for name, module, expected in seen:
        got = values.get(last[name])
        if got is None or tuple(got.shape) != tuple(expected.shape):
            continue
        report = compare_outputs([expected], [got], atol, rtol, values_only=not state.get("dtype_differs"))
        if report["code"] is None:
            continue
        node = producers.get(last[name])
        source = None
        code = getattr(getattr(type(module), "forward", None), "__code__", None)
        if code is not None and target is not None:  # the module's forward(), in the user's folder
            with contextlib.suppress(OSError, ValueError):
                file = Path(code.co_filename)
                if file.resolve().is_relative_to(Path(target).resolve().parent):
                    source = f"{file.name}:{code.co_firstlineno}"
        return {
            "module": name, "module_class": type(module).__name__, "source": source,
            "value": last[name], "node": node.name if node is not None else None,
            "op": node.op_type if node is not None else None,
            "max_abs_diff": report["max_abs_diff"], "max_rel_diff": report["max_rel_diff"],
            "compared": len(seen),
        }
    return None


def scope_names(segments: list[str]) -> list[str]:
    """The module qualnames of a TorchScript node's scope, outermost first.

    A segment is the module's path from the nearest module that was called, so a Sequential's
    child repeats its parent ("/layers/layers.2/act" is `layers.2.act`) while a ModuleList's
    item, never called itself, does not ("/layers.0/lin" is `layers.0.lin`).
    """
    names: list[str] = []
    current, previous = "", ""
    for segment in segments:
        if previous and segment.startswith(previous + "."):
            current = current[: len(current) - len(previous)] + segment
        else:
            current = f"{current}.{segment}" if current else segment
        names.append(current)
        previous = segment
    return names


def first_diverging_symbolic(state: dict[str, Any], atol: float, rtol: float) -> dict[str, Any] | None:
    """TorchScript exports: the first call of a user's symbolic whose nodes compute a value that
    differs from what the op (or autograd.Function) computes in PyTorch.

    The provenance table numbers each symbolic call; the nodes one call wrote together produce
    its result (their outputs no other node of the call reads). PyTorch's result of the same call
    is recorded in eager (a dispatch mode for a custom op, the Function's forward for a Function):
    calls happen in the order the tracer recorded them.
    """
    import onnx
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from onnxdoctor.protocol import FUNCTION_SYMBOLIC, REGISTERED_SYMBOLIC
    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.loader import function_class

    rows = [r for r in state.get("provenance") or ()
            if r.call >= 0 and (r.emitter == FUNCTION_SYMBOLIC and r.function_class
                                or r.emitter == REGISTERED_SYMBOLIC and "::" in r.torch_op)]
    if not rows:
        return None
    loaded = state["loaded"]
    model = onnx.load(str(state["onnx_path"]))
    nodes = {n.name: n for n in model.graph.node}
    groups: dict[tuple[str, int], list[Any]] = {}
    for row in rows:
        key = row.function_class if row.emitter == FUNCTION_SYMBOLIC else row.torch_op
        groups.setdefault((key, row.call), []).append(row)
    eager: dict[str, list[list[Any]]] = {key: [] for key, _call in groups}
    ops = {key for key in eager if "::" in key}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            name = func._schema.name if hasattr(func, "_schema") else ""
            if name in ops:
                eager[name].append([t.detach().clone() for t in tensor_leaves(result)])
            return result

    undo = []
    try:
        for key in eager:
            if "::" in key:
                continue
            cls = function_class(key, loaded)
            owner = next(c for c in cls.__mro__ if "forward" in c.__dict__)
            original = owner.__dict__["forward"]

            def forward(ctx: Any, *args: Any, _original: Any = original, _key: str = key, **kwargs: Any) -> Any:
                result = _original.__func__(ctx, *args, **kwargs)
                eager[_key].append([t.detach().clone() for t in tensor_leaves(result)])
                return result

            owner.forward = staticmethod(forward)
            undo.append((owner, original))
        with torch.no_grad(), (Record() if ops else contextlib.nullcontext()):
            loaded.model(*loaded.args, **(loaded.kwargs or {}))
    finally:
        for owner, original in undo:
            owner.forward = original
    produced = {key: call_outputs([nodes[r.node] for r in members if r.node in nodes])
                for key, members in groups.items()}
    values, _feeds = run_exposing(model, [v for outputs in produced.values() for v in outputs],
                                  loaded.args, loaded.kwargs)
    producers = {out: n for n in model.graph.node for out in n.output}
    compared = 0
    for (key, call), outputs in produced.items():
        calls = eager.get(key) or []
        if call >= len(calls):
            continue
        for name, expected in zip(outputs, calls[call], strict=False):
            got = values.get(name)
            if got is None:
                continue
            compared += 1
            report = compare_outputs([expected], [got], atol, rtol, values_only=not state.get("dtype_differs"))
            if report["code"] is None:
                continue
            node = producers.get(name)
            row = next(r for r in groups[(key, call)] if node is not None and r.node == node.name)
            return {
                "value": name, "node": node.name if node is not None else None,
                "op": row.op, "torch_op": row.torch_op if row.emitter == REGISTERED_SYMBOLIC else "",
                "onnx_op": row.op, "source": row.source or None,
                "module": row.module.split(" (")[0], "module_class": row.module.partition(" (")[2].rstrip(")"),
                "symbolic": row.function if row.emitter == REGISTERED_SYMBOLIC
                else f"{row.function_class.rpartition(':')[2]}.symbolic ({row.function.split(' ')[0]})",
                # Figures only where the values compare (not a shape or a dtype that differs).
                "max_abs_diff": report["max_abs_diff"] if report["code"] == "OD601" else None,
                "max_rel_diff": report["max_rel_diff"] if report["code"] == "OD601" else None,
                "compared": compared, "code": report["code"],
            }
    return None




def _traced_values(loaded: Any, at: tuple[tuple[Any, ...], dict[str, Any] | None] | None = None,
                   ) -> dict[str, list[list[Any]]] | None:
    """PyTorch's value of every aten node of the model's trace, per op kind in trace order.

    The trace the TorchScript exporter converts (`torch.jit._get_trace_graph`, inlined) is run
    again with each node's tensor outputs gathered into one tuple: the values PyTorch computes for
    exactly the nodes the symbolics converted. `at`: traced and run at those inputs instead of
    the example's. None when the trace cannot be rebuilt and run.
    """
    import torch

    from onnxdoctor.worker.facts import tensor_leaves

    args, kwargs = at if at is not None else (loaded.args, loaded.kwargs)
    graph = _trace_graph(loaded, at)
    torch._C._jit_pass_inline(graph)
    gathered: list[tuple[str, int, Any]] = []
    for index, node in enumerate(list(graph.nodes())):
        kind = str(node.kind())
        if not kind.startswith("aten::"):
            continue
        # The exporter converts `add_` as `add` (it removes in-place ops first).
        kind = kind[:-1] if kind.endswith("_") and not kind.endswith("__") else kind
        after = node
        for value in list(node.outputs()):
            if value.type().kind() != "TensorType":
                continue
            # A copy taken right here: a later in-place op must not change the value compared.
            none = graph.create("prim::Constant")
            none.output().setType(torch._C.NoneType.get())
            none.insertAfter(after)
            copy = graph.create("aten::clone", [value, none.output()], 1)
            copy.insertAfter(none)
            copy.output().setType(value.type())
            after = copy
            gathered.append((kind, index, copy.output()))
    if not gathered:
        return None
    while len(list(graph.outputs())):
        graph.eraseOutput(0)
    pack = graph.create("prim::TupleConstruct", [v for _k, _i, v in gathered], 1)
    graph.appendNode(pack)
    pack.output().setType(torch._C.TupleType([v.type() for _k, _i, v in gathered]))
    graph.registerOutput(pack.output())
    function = torch._C._create_function_from_graph("onnxdoctor_trace_values", graph)
    inputs = tensor_leaves((tuple(args), kwargs or {}))
    params = list(torch.jit._unique_state_dict(loaded.model, keep_vars=True).values())
    if len(list(graph.inputs())) != len(inputs) + len(params):
        return None
    with torch.no_grad():
        results = function(*inputs, *params)
    values: dict[str, list[list[Any]]] = {}
    node_of: dict[int, list[Any]] = {}
    for (kind, index, _value), result in zip(gathered, results, strict=True):
        if index not in node_of:
            node_of[index] = []
            values.setdefault(kind, []).append(node_of[index])
        if isinstance(result, torch.Tensor):
            node_of[index].append(result.detach().clone())
    return values


# Nodes the TorchScript exporter writes to put a shape together from its dims.
_SHAPE_ASSEMBLY = frozenset({"Concat", "Unsqueeze", "Squeeze", "Cast", "Identity"})


def first_diverging_traced(state: dict[str, Any], atol: float, rtol: float, shapes: bool = False,
                           at: tuple[tuple[Any, ...], dict[str, Any] | None] | None = None) -> dict[str, Any] | None:
    """TorchScript exports: the first aten op whose nodes compute a value PyTorch computes otherwise.

    `shapes` (an output of another shape, OD603): the first call, in graph order, whose result has
    another shape than the trace's same-numbered call of that op.

    `at` (args, kwargs): other inputs, where the export differs though it matched at the example
    (a value the tracer froze). PyTorch's values there come from a trace taken there, which holds
    the right constants; the first call, in graph order, whose result differs in shape or value
    is where the frozen value first shows. Only where both traces run the same ops the same
    number of times: a trace that took another branch there does not line up call by call.

    The provenance table numbers each symbolic call per torch op (the third aten::floor_divide
    converted is call 2); the nodes one call wrote together produce its result (their outputs no
    other node of the call reads). PyTorch's value of the same call is the same-numbered node of
    that kind in the trace (`_traced_values`). Calls are compared in graph order, so the first
    that differs is where the difference arises, not a consequence of it; a kind whose calls do
    not line up (a shape that differs) is left out rather than blamed.
    """
    import onnx

    from onnxdoctor.protocol import REGISTERED_SYMBOLIC, TORCH_SYMBOLIC

    rows = [r for r in state.get("provenance") or ()
            if r.call >= 0 and r.emitter in (TORCH_SYMBOLIC, REGISTERED_SYMBOLIC) and r.torch_op.startswith("aten::")]
    if not rows:
        return None
    traced = _traced_values(state["loaded"], at)
    if not traced:
        return None
    if at is not None:
        example = _traced_values(state["loaded"]) or {}
        if {k: len(v) for k, v in example.items()} != {k: len(v) for k, v in traced.items()}:
            return None
    model = onnx.load(str(state["onnx_path"]))
    position = {n.name: i for i, n in enumerate(model.graph.node)}
    nodes = {n.name: n for n in model.graph.node}
    groups: dict[tuple[str, int], list[Any]] = {}
    for row in rows:
        if row.node in nodes:
            groups.setdefault((row.torch_op, row.call), []).append(row)
    produced = {key: call_outputs([nodes[r.node] for r in members]) for key, members in groups.items()}
    # The groups' inputs too: the reference evaluator reruns the diverging group on them.
    initializers = {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
    read = [i for members in groups.values() for r in members for i in nodes[r.node].input
            if i and i not in initializers]
    loaded = state["loaded"]
    args, kwargs = at if at is not None else (loaded.args, loaded.kwargs)
    values, feeds = run_exposing(model, [v for outputs in produced.values() for v in outputs] + read, args, kwargs)
    producers = {out: n for n in model.graph.node for out in n.output}
    pairs: list[tuple[int, tuple[str, int], str, Any]] = []
    misaligned: set[str] = set()
    if len({c for k, c in groups if k == "aten::batch_norm"}) < len(traced.get("aten::batch_norm") or ()):
        # The exporter folded eval-mode batch norms into the convolutions before them: those
        # Conv nodes compute convolution and norm, which the trace's convolution call does not.
        # Which convolutions had a norm is not recorded, so none is compared (the later calls
        # that read them still are).
        misaligned |= {k for k, _c in groups if k in ("aten::_convolution", "aten::conv2d", "aten::conv1d",
                                                      "aten::conv3d", "aten::convolution")}
    reshaped: list[tuple[int, tuple[str, int], str, Any]] = []
    for (kind, call), outputs in produced.items():
        calls = traced.get(kind) or []
        if call >= len(calls) or len(outputs) != len(calls[call]):
            continue
        for name, expected in zip(outputs, calls[call], strict=True):
            got = values.get(name)
            if got is None:
                continue
            where = max(position[r.node] for r in groups[(kind, call)])
            if tuple(got.shape) != tuple(expected.shape):
                misaligned.add(kind)
                reshaped.append((where, (kind, call), name, expected))
                continue
            pairs.append((where, (kind, call), name, expected))
    first_reshaped = min(reshaped, key=lambda p: p[0]) if reshaped else None
    if first_reshaped is not None and (shapes or at is not None):
        place, (kind, call), name, expected = first_reshaped
        node = producers.get(name)
        row = next((r for r in groups[(kind, call)] if node is not None and r.node == node.name), groups[(kind, call)][0])
        reshaped_at = {"value": name, "node": node.name if node is not None else None, "op": row.op, "torch_op": kind,
                       "source": row.source or None, "scope": row.module or None, "code": "OD603",
                       "shapes": [list(expected.shape), list(values[name].shape)]}
        if node is not None and node.op_type == "Constant":
            # A frozen size is a Constant (the shape of a view's Reshape): the node it feeds holds it.
            # Through the nodes that only assemble a shape (Concat of its dims) to the op taking it.
            user, value = None, name
            for _ in range(8):
                user = next((n for n in model.graph.node if value in n.input), None)
                if user is None or user.op_type not in _SHAPE_ASSEMBLY or not user.output:
                    break
                value = user.output[0]
            if user is not None:
                reshaped_at["consumer"] = {"node": user.name, "op": user.op_type}
        if shapes:
            return reshaped_at
        # At other inputs: a value that differs before the first shape that does comes first.
        pairs = [p for p in pairs if p[0] < place]
    elif shapes:
        return None
    pairs.sort(key=lambda p: p[0])
    compared = 0
    # Values known to equal PyTorch's: the model's inputs, its constants, and each call that matched.
    agreed = initializers | {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    for _at, key, name, expected in pairs:
        if key[0] in misaligned:
            continue
        compared += 1
        report = compare_outputs([expected], [values[name]], atol, rtol, values_only=not state.get("dtype_differs"))
        if report["code"] is None:
            agreed.add(name)
            continue
        node = producers.get(name)
        row = next((r for r in groups[key] if node is not None and r.node == node.name), groups[key][0])
        members = [nodes[r.node] for r in groups[key]]
        inside = {o for n in members for o in n.output}
        # Only a call whose inputs all agree is where the difference arises; otherwise it may
        # inherit it from nodes no call accounts for (the search says so rather than blame it).
        inputs_agree = all(i in agreed or i in inside for n in members for i in n.input if i)
        if inputs_agree and _another_call(values[name], traced.get(key[0]) or [], key[1], atol, rtol):
            # The node computes what PyTorch computed at another call of the op: the exporter
            # converted this op's calls in another order than the trace ran them (an in-place
            # index_add_ between Linear calls in a loop), so its calls do not line up.
            misaligned.add(key[0])
            continue
        unchecked = [producers[i] for n in members for i in n.input
                     if i and i not in agreed and i not in inside and i in producers]
        random = sorted({n.op_type for n in members if n.op_type in RANDOM_OPS})
        folded = _wrong_fold(model, members, rows, traced, loaded, atol, rtol)
        if folded is None and inputs_agree:
            folded = _dropped_in_place(model, members, rows, traced, values, feeds, (name, expected), atol, rtol)
        producers_left = list({n.name: n for n in unchecked}.values())
        moves = {n.op_type for n in members if n.op_type != "Constant"}
        if not inputs_agree and len(producers_left) == 1 and moves and moves <= _MOVES_VALUES:
            # A node that only moves values cannot make them differ: its one input the search could
            # not compare does (a MaxPool the trace records as adaptive_max_pool2d's pair).
            source = producers_left[0]
            origin = next((r for r in rows if r.node == source.name), None)
            return {
                "value": source.output[0] if source.output else name, "node": source.name, "op": source.op_type,
                "torch_op": origin.torch_op if origin is not None else None,
                "source": (origin.source if origin is not None else None) or row.source or None,
                "scope": (origin.module if origin is not None else None) or row.module or None,
                "max_abs_diff": report["max_abs_diff"] if report["code"] == "OD601" else None,
                "max_rel_diff": report["max_rel_diff"] if report["code"] == "OD601" else None,
                # Not compared itself: what the search says of values it could not compare holds.
                "compared": compared, "code": report["code"], "inputs_agree": False,
                "moved_by": f"{node.name if node is not None else name} ({'/'.join(sorted(moves))})",
            }
        return {
            "value": name, "node": node.name if node is not None else None,
            "op": row.op, "torch_op": (folded or {}).get("torch_op", key[0]), **(folded or {}),
            "source": row.source or None, "scope": row.module or None,
            "max_abs_diff": report["max_abs_diff"] if report["code"] == "OD601" else None,
            "max_rel_diff": report["max_rel_diff"] if report["code"] == "OD601" else None,
            "compared": compared, "code": report["code"], "inputs_agree": inputs_agree,
            "unchecked_inputs": list({n.name: {"node": n.name, "op": n.op_type} for n in unchecked}.values())[:5],
            "group_ops": [n.op_type for n in members if n.op_type != "Constant"],
            **({"random": random} if random
               else runtime_against_reference(model, members, values, feeds, atol, rtol) if inputs_agree else {}),
        }
    return reshaped_at if at is not None and first_reshaped is not None else None


def _another_call(got: Any, calls: list[list[Any]], call: int, atol: float, rtol: float) -> bool:
    """Whether `got` equals PyTorch's result of another call of the same op (same shape and values)."""
    for other, results in enumerate(calls):
        if other == call:
            continue
        for expected in results:
            if tuple(expected.shape) == tuple(got.shape) and compare_outputs(
                    [expected], [got], atol, rtol, values_only=True)["code"] is None:
                return True
    return False


# ONNX ops that move or select values without computing new ones: equal inputs, equal outputs.
_MOVES_VALUES = frozenset({"Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Concat",
                           "Slice", "Gather", "Expand", "Split", "Tile"})


def _wrong_fold(model: Any, members: list[Any], rows: list[Any], traced: dict[str, list[list[Any]]],
                loaded: Any, atol: float, rtol: float) -> dict[str, Any] | None:
    """A constant input of the diverging nodes that the TorchScript exporter folded (not one of the
    model's parameters or buffers) and that differs from what PyTorch computes for it.

    Constant folding runs the exporter's own symbolics on the parameters (weight_norm's, say) and
    stores the result: the node then computes the right op on a wrong constant, and the op to name
    is the folded one. Which op: one the trace ran that no node of the file was written for (it
    was folded away), a call of which has the constant's shape and other numbers."""
    from onnx import numpy_helper

    own = {n for n, _ in loaded.model.named_parameters()} | {n for n, _ in loaded.model.named_buffers()}
    constants = {t.name: t for t in model.graph.initializer}
    inputs = [i for n in members for i in n.input if i in constants and i not in own]
    for name in dict.fromkeys(inputs):
        value = numpy_helper.to_array(constants[name])
        for kind, expected in _unwritten_results(rows, traced):
            if tuple(expected.shape) == tuple(value.shape) and \
                    compare_outputs([expected], [value], atol, rtol)["code"] is not None:
                return {"torch_op": kind, "folded_input": name, "folded": [kind]}
    return None


def _unwritten_results(rows: list[Any], traced: dict[str, list[list[Any]]]) -> Iterator[tuple[str, Any]]:
    """(torch op, a call's result) for the ops the trace ran that no node of the file was written
    for (folded, fused or dropped), but not ops that only move values. The trace records in-place
    calls out of place (aten::masked_fill for masked_fill_)."""
    written = {r.torch_op for r in rows}
    for kind, calls in traced.items():
        if kind in written or kind.split("::", 1)[-1].rstrip("_") in _MOVING:
            continue
        for call in calls:
            for result in call:
                yield kind, result


def _dropped_in_place(model: Any, members: list[Any], rows: list[Any], traced: dict[str, list[list[Any]]],
                      values: dict[str, Any], feeds: dict[str, Any], differing: tuple[str, Any],
                      atol: float, rtol: float) -> dict[str, Any] | None:
    """An op (written in place) the trace ran that no node of the file was written for.

    `scores.view(...).masked_fill_(mask, ...)` writes into `scores` through a view; the exporter
    writes the op on the view's value, which nothing reads, and drops it as dead code. The node
    that then differs reads `scores` as it was before the write (its inputs agree with the trace's
    copy taken where `scores` was computed). The dropped op is the one whose result, put in place
    of one of the node's inputs, makes ONNX's reference implementation of the node give PyTorch's
    value (`differing`: the value's name and PyTorch's number for it). An op fused into another
    (batch_norm into a Conv) has no node either, but is never that."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    produced = {o for n in members for o in n.output if o}
    initializers = {t.name: t for t in model.graph.initializer}
    known = {**feeds, **values}
    read = list(dict.fromkeys(i for n in members for i in n.input if i and i not in produced))
    if any(i not in initializers and i not in known for i in read):
        return None
    name, expected = differing
    graph = helper.make_graph(list(members), "dropped", [onnx.ValueInfoProto(name=i) for i in read if i not in initializers],
                              [onnx.ValueInfoProto(name=name)], [initializers[i] for i in read if i in initializers])
    try:
        evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=list(model.opset_import),
                                                         ir_version=model.ir_version))
    except Exception:  # an op the evaluator lacks: no judgement
        return None
    for kind, result in _unwritten_results(rows, traced):
        if getattr(result, "ndim", 0) < 1 or not result.is_floating_point():
            continue
        for target in (i for i in read if i in known and np.asarray(known[i]).size == result.numel()):
            trial = {i: np.asarray(known[i]) for i in read if i not in initializers}
            trial[target] = result.detach().numpy().reshape(trial[target].shape).astype(trial[target].dtype)
            try:
                (got,) = evaluator.run(None, trial)
            except Exception:  # noqa: S112 (a trial value the node rejects: not this op's)
                continue
            if compare_outputs([expected], [got], atol, rtol)["code"] is None:
                return {"torch_op": kind, "dropped_in_place": kind}
    return None


def runtime_against_reference(model: Any, members: list[Any], values: dict[str, Any], feeds: dict[str, Any],
                              atol: float, rtol: float) -> dict[str, Any]:
    """Whether ONNX Runtime computes the diverging nodes as ONNX's reference evaluator does.

    The nodes are run alone in onnx's reference implementation on ONNX Runtime's own values of
    their inputs. Agreeing, the graph says something other than the PyTorch code did: the
    export is at fault. Disagreeing, the runtime departs from the ONNX specification for these
    nodes.
    """
    import onnx
    from onnx import helper

    produced = {o for n in members for o in n.output if o}
    read = [i for n in members for i in n.input if i and i not in produced]
    initializers = {t.name: t for t in model.graph.initializer}
    known = {**feeds, **values}
    inputs, constants = [], []
    for name in dict.fromkeys(read):
        if name in initializers:
            constants.append(initializers[name])
        elif name in known:
            inputs.append(name)
        else:
            return {}
    outputs = [o for o in produced if o in values and not any(o in n.input for n in members)]
    if not outputs:
        return {}
    try:
        from onnx.reference import ReferenceEvaluator

        graph = helper.make_graph(list(members), "diverging", [onnx.ValueInfoProto(name=n) for n in inputs],
                                  [onnx.ValueInfoProto(name=n) for n in outputs], list(constants))
        small = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
        expected = ReferenceEvaluator(small).run(None, {n: np.asarray(known[n]) for n in inputs})
    except Exception:  # an op the evaluator lacks, or nested graphs: no judgement
        return {}
    report = compare_outputs(list(expected), [values[o] for o in outputs], atol, rtol)
    if report["code"] is None:
        return {"runtime_matches_reference": True}
    # Which node departs: each run alone on ONNX Runtime's own inputs (STFT among reshapes).
    for member in members if len(members) > 1 else ():
        alone = runtime_against_reference(model, [member], values, feeds, atol, rtol)
        if alone.get("runtime_matches_reference") is False:
            return {"runtime_matches_reference": False, "departing_op": member.op_type,
                    "departing_node": member.name}
    return {"runtime_matches_reference": False}
