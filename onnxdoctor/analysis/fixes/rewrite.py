"""Rewrite an aten op no exporter maps with the op-rewrite library (onnxdoctor.rewrites).

The snippet defines the library's function for the op and exports
`torch.export.export(model, example_inputs).run_decompositions({op: function})` with the dynamo
exporter; the worker runs that same code (the recipe's prelude) and exports the `program` it
builds, so what is verified is what the user pastes.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.classify import STOPPED_AT_OP
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.dynamic_shapes import axes_as_shapes
from onnxdoctor.analysis.fixes.exporter import TORCHSCRIPT_OPSETS
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import ExportCode, LoadCode, Recipe, Step, UseExporter, UseOpset
from onnxdoctor.rewrites import REWRITES, Exactness, Rewrite, find_rewrites
from onnxdoctor.rewrites.entry import decomposing

# Any finding that names an op: no exporter maps it (OD202), not at this opset (OD201), a
# failure only the message names (OD299), or a mismatch located at the nodes exported for it
# (OD601: the library's version of the op gives PyTorch's numbers where the export does not); a
# node the checker or shape inference refuses (OD301-OD304), or the exporter's crash while it built
# the node (OD901), where the library writes the op in other ops.
CODES = ("OD201", "OD202", "OD299", "OD601", "OD301", "OD302", "OD303", "OD304", "OD901",
         # torch.export's capture stopped at an op the library has (only the call route reaches it).
         "OD204")


def _complex_inputs(ctx: FixContext) -> bool:
    """Whether the script's example inputs hold complex tensors."""
    return any(isinstance(x, dict) and str(x.get("dtype", "")).startswith("complex")
               for x in ctx.facts_of(Stage.LOAD).get("inputs") or ())


def program_code(rewrites: tuple[Rewrite, ...], failed: str | None = None) -> str:
    """Code that builds `program`, the model's ExportedProgram with every given op rewritten
    (`failed`: the op the failure named)."""
    if len(rewrites) == 1:
        return rewrites[0].program_code(failed)
    header = "import math\n\nimport torch\n\n\n"
    parts, table = [], []
    for rewrite in rewrites:
        parts.append(
            f"# {rewrite.op} rewritten in ops ONNX has ({rewrite.exactness.value}: {rewrite.error}).\n"
            f"# Limits: {rewrite.limits}\n" + rewrite.source.strip("\n")
        )
        table.extend(f"torch.ops.{t}: {rewrite.function_for(t)}" for t in rewrite.targets)
    return (
        header + "\n\n\n".join(parts) + "\n\n\n"
        + decomposing("{" + ", ".join(table) + "}", [r.called_group(failed) for r in rewrites])
    )


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The library's rewrite of the op: exported through run_decompositions (dynamo exporter), and
    in place of its public call while the TorchScript exporter traces where the entry lists calls
    or torch.export's capture stopped at the op (`_called`)."""
    if ctx.target_kind != "script":
        return []
    if finding.code == "OD204":
        # Only where torch.export's fake tensors stopped at the op itself (not a guard on data).
        text = f"{finding.message} {ctx.export_error}"
        if not STOPPED_AT_OP.search(text):
            return []
        rewrites = tuple(r for r in find_rewrites(ctx.op) if not r.mismatch_only and (not r.when or re.search(r.when, text)))
        called = _called(ctx, rewrites, derive=True)
        return [called] if called is not None else []
    symbolic: Fix | None = None
    if finding.code == "OD601":
        # The search's first differing call; else the torch op the finding's node was exported from.
        rewrites = find_rewrites(_diverging_torch_op(ctx) or (finding.torch_op if not ctx.diverging else None))
        # The complex family's matmul, mul or exp is for complex values: a real one that differs
        # differs for another reason (and the dynamo export would pass under its name).
        rewrites = tuple(r for r in rewrites if r.family != "complex"
                         or _COMPLEX.search(f"{finding.message} {' '.join(finding.evidence)}"))
        if not rewrites:
            return []
    else:
        symbolic = _symbolic_rewrite(finding, ctx)
        if symbolic is not None and ctx.op not in _WITH_LIBRARY:
            return [symbolic]
        # Complex values the exporter wrote as such (a complex64 initializer one node mixes with
        # the float pairs it writes for other complex tensors, pytorch#170054): the complex entry
        # rewrites the computation as a whole, whichever op the failure names.
        complex_values = tuple(r for r in REWRITES if r.family == "complex") if (
            finding.stage is Stage.CHECK and _COMPLEX.search(finding.message)) else ()
        if not any(not r.mismatch_only for r in find_rewrites(ctx.op)) and not complex_values:
            return [symbolic] if symbolic is not None else []
        # The worker lists every op the exporter has no function for; one program rewrites them all.
        ops = [ctx.op, *(u.get("op") for u in ctx.export_facts.get("unsupported_ops") or () if isinstance(u, dict))]
        rewrites = tuple(dict.fromkeys([*(r for op in ops for r in find_rewrites(op) if not r.mismatch_only),
                                        *complex_values]))
        # The complex family replaces common ops (mul, exp, split) only where complex values are
        # involved: for a failure that has none it would be the dynamo exporter under another name.
        text = f"{finding.message} {ctx.export_error}"
        rewrites = tuple(r for r in rewrites if r.family != "complex" or _COMPLEX.search(text))
        if not rewrites:
            return [symbolic] if symbolic is not None else []
    text = f"{finding.message} {ctx.export_error} {' '.join(finding.evidence)}"
    rewrites = tuple(r for r in rewrites if not r.when or re.search(r.when, text))
    if not rewrites:
        return [symbolic] if symbolic is not None else []
    called = _called(ctx, rewrites) if any(r.calls for r in rewrites) else None
    if called is not None and not all(r.captured for r in rewrites):
        # An op torch.export cannot capture: no program holds it for run_decompositions.
        return [f for f in (symbolic, called) if f is not None]
    code = program_code(rewrites, ctx.op)
    settings = ctx.facts_of(Stage.LOAD).get("settings") or {}
    if not settings.get("dynamic_shapes"):
        # The program is captured by torch.export: the dims the script declares dynamic the
        # TorchScript way (dynamic_axes, for either exporter) are declared to it too, or the
        # rewrite is checked at fixed sizes.
        code = (axes_as_shapes(ctx, widen=True) or "") + code
    worst = max((r.exactness for r in rewrites), key=list(Exactness).index)
    # Each rewrite by the name the failure gave its op (one entry covers bitwise and, or and xor).
    names = ", ".join(dict.fromkeys(_shown_name(r, ctx.op) for r in rewrites))
    sparse = [i for i, x in enumerate(ctx.facts_of(Stage.LOAD).get("inputs") or ())
              if isinstance(x, dict) and x.get("layout")]
    steps: tuple[Step, ...] = (UseExporter("dynamo"), ExportCode(code, program="program"))
    if sparse:
        # ONNX has no sparse tensors: the exported model takes those inputs dense (changing the
        # example is process-wide for the worker's later runs: a worker of its own).
        steps = (LoadCode(_DENSE_INPUTS), *steps)
    return [*([symbolic] if symbolic is not None else []), *([called] if called is not None else []),
        Fix(
            kind="rewrite",
            title=f"Rewrite {names} in exportable torch ops (op-rewrite library, {worst.value})"
            + (f"; sparse input{'s' if len(sparse) > 1 else ''} {', '.join(map(str, sparse))} given dense" if sparse else ""),
            snippet=(_DENSE_INPUTS + "\n" if sparse else "") + code
            + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n",
            # An approximation changes the numbers (within its stated bound): the user decides.
            applicability=Applicability.UNSAFE if worst is Exactness.APPROXIMATION else Applicability.SAFE,
            cost="; ".join(f"{r.op}: {r.limits}" for r in rewrites) + (
                "; the model's complex inputs are (real, imaginary) pairs in a trailing dim of 2, as the dynamo "
                "exporter writes complex tensors: feed torch.view_as_real(x)" if _complex_inputs(ctx) else ""),
            # Beside a call route (isolated, ranked first: the tracer writes an unrolled algorithm
            # far faster), isolated too, so that the checks run in rank order rather than this one
            # first in the main worker.
            recipe=Recipe("rewrite", steps, isolated=bool(sparse) or called is not None),
        )
    ]


_CALLS_REWRITTEN = '''

class CallsRewritten(torch.nn.Module):
    """The model, with the library's functions in place of torch's while it runs (while it is
    traced for the export): torch itself is left as it was before and after."""

    def __init__(self, model, patches):
        super().__init__()
        self.model = model
        self.patches = patches
        # The model's own mode: an export that switches modes for itself restores the wrapper's,
        # recursively, and would leave an eval model training.
        self.train(model.training)

    def forward(self, *args, **kwargs):
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in self.patches if hasattr(owner, name)]
        for owner, name, (function, returned) in self.patches:
            if hasattr(owner, name):
                setattr(owner, name, _standing_in(function, getattr(torch.return_types, returned, None)))
        try:
            return self.model(*args, **kwargs)
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)


def _standing_in(function, kind):
    # torch returns a named tuple (`.solution`) where the library's function returns a plain one.
    def call(*args, **kwargs):
        out = function(*args, **kwargs)
        return kind(out) if kind is not None and type(out) is tuple else out

    return call
'''


def _called(ctx: FixContext, rewrites: tuple[Rewrite, ...], *, derive: bool = False) -> Fix | None:
    """The library's functions in place of the public calls of their ops while the TorchScript
    exporter traces the model (a wrapper patches them for its forward() alone, so PyTorch's own
    reference is untouched): for ops torch.export cannot capture, and for unrolled algorithms the
    tracer writes far faster than the dynamo exporter. `derive` (torch.export's capture stopped at the
    op, OD204): also the names the op's name suggests for entries that list none."""
    parts, patches, calls = [], [], []
    for rewrite in rewrites:
        listed = rewrite.public_calls() if derive and "." not in rewrite.op.split("::")[-1] else rewrite.calls
        if not listed:
            continue
        parts.append(f"# {rewrite.op} rewritten in ops ONNX has ({rewrite.exactness.value}: {rewrite.error}).\n"
                     f"# Limits: {rewrite.limits}\n" + rewrite.source.strip("\n"))
        for call, function in listed:
            owner, name = call.rsplit(".", 1)
            # torch.return_types names a tuple-returning op after its module (linalg_svd).
            returned = ("linalg_" if owner == "torch.linalg" else "") + name
            calls.append(call)
            patches.append(f"    ({owner}, {name!r}, ({function}, {returned!r})),\n")
    if not patches:
        return None
    code = ("import math\n\nimport torch\n\n\n" + "\n\n\n".join(parts) + "\n" + _CALLS_REWRITTEN
            + "\n\n# The calls the model makes, rewritten while it runs for the export (inside the\n"
            + "# wrapper of an earlier step's rewrites, where there is one: both apply).\n"
            + "try:\n    earlier = traced_model\nexcept NameError:\n    earlier = None\n"
            + "traced_model = CallsRewritten(earlier if type(earlier).__name__ == 'CallsRewritten' else model, [\n"
            + "".join(patches) + "])\n")
    worst = max((r.exactness for r in rewrites), key=list(Exactness).index)
    ops = ", ".join(dict.fromkeys(r.op for r in rewrites))
    steps: tuple[Step, ...] = (UseExporter("torchscript"), ExportCode(code, program="traced_model", nests=True))
    if (ctx.requested_opset or 0) > TORCHSCRIPT_OPSETS[-1]:
        steps = (*steps, UseOpset(TORCHSCRIPT_OPSETS[-1]))
    cost = "; ".join(f"{r.op}: {r.limits}" for r in rewrites) + (
        "; only calls made through these names are replaced (not a name imported from torch before); "
        "the TorchScript exporter is deprecated (opsets 7-20)")
    if derive:
        # The capture stopped at the op (OD204): the tracer records only the branches this example takes.
        cost += "; TorchScript traces the branch the example input takes and bakes it in"
    return Fix(
        kind="rewrite",
        title=f"Call the op-rewrite library's {ops} in place of {', '.join(calls)} while the TorchScript "
              f"exporter traces the model ({worst.value})",
        snippet=code + "\ntorch.onnx.export(traced_model, example_inputs, 'model.onnx', dynamo=False)\n",
        applicability=Applicability.UNSAFE if worst is Exactness.APPROXIMATION or derive
        else Applicability.SAFE,
        cost=cost,
        # Its own worker: the export changes torch's callables while it runs.
        recipe=Recipe("rewrite_call", steps, isolated=True),
    )


def _shown_name(rewrite: Rewrite, failing: str | None) -> str:
    """The rewrite's op as the failure named it, for an entry covering several ops of equal standing
    (bitwise and, or, xor); else the entry's own name (not a prims op torch reported, nor one op of
    a computation the entry rewrites as a whole, like complex values)."""
    name = (failing or "").split(".")[0]
    if rewrite.named_by_failure and name in rewrite.reported_as:
        return name
    return rewrite.op.split(".")[0]


# A failure about complex values (not a schema list that mentions `complex a`).
_COMPLEX = re.compile(r"complex-valued|number type: complex|Complex(?:Float|Double|Half)|complex(?:64|128)|"
                      r"aten::complex\b")

_DENSE_INPUTS = (
    "import torch\n\n"
    "# ONNX has no sparse tensors: export (and run) the model with its sparse inputs dense;\n"
    "# feed ONNX Runtime `x.to_dense().numpy()` for each of them.\n"
    "example_inputs = tuple(x.to_dense() if isinstance(x, torch.Tensor) and x.layout != torch.strided else x\n"
    "                       for x in example_inputs)\n"
)


def _diverging_torch_op(ctx: FixContext) -> str | None:
    """The torch op whose exported nodes a mismatch's search found differing first, if any."""
    diverging = ctx.diverging
    # A random node whose draws differ only as draws do is no rewrite's business; one whose
    # distribution differs too (the runtime samples something else) is.
    drawn = diverging.get("random") and diverging.get("in_distribution") is not False
    if diverging and not drawn and not diverging.get("symbolic"):
        return diverging.get("torch_op") or None
    return None


# Ops the run_decompositions route cannot reach, but whose TorchScript symbolic is short: op ->
# (exactness, limits, code registering the symbolic, what the title says it maps the op to, the
# lowest opset it needs). int_repr: torch.export cannot trace quantized tensors at all. The
# fake-quantize ops: torch's symbolics write QuantizeLinear/DequantizeLinear, which take only 8-bit
# ranges ("ONNX allows only (0, 127), (0, 255) and (-128, 127)"), and torch.export of a QAT model
# stops at the observers' data-dependent checks; the same arithmetic in float ops takes any range.
_INT_REPR = """import torch
from torch.onnx._internal.torchscript_exporter import symbolic_helper


def int_repr(g, quantized):
    # The exporter carries a quantized tensor as (QuantizeLinear output, scale, zero point):
    # its integer values are the QuantizeLinear output itself.
    return symbolic_helper._unpack_quantized_tensor(quantized)[0]


torch.onnx.register_custom_op_symbolic('aten::int_repr', int_repr, 10)
"""

_FAKE_QUANTIZE = """import torch
from torch.onnx._internal.torchscript_exporter import symbolic_helper


def _float_tensor(g, value):
    if symbolic_helper._is_constant(value) and not symbolic_helper._is_tensor(value):
        # A Python number (the per-tensor overload's scale and zero point).
        return g.op("Constant", value_t=torch.tensor(float(symbolic_helper._maybe_get_const(value, "f"))))
    return g.op("Cast", value, to_i=1)  # 1: FLOAT; a tensor, constant or not


def _fake_quantize(g, x, scale, zero_point, axis, quant_min, quant_max):
    # PyTorch's arithmetic: (clamp(round(x * (1 / scale)) + zero_point, min, max) - zero_point) * scale,
    # rounding half to even as ONNX Round does; in float ops, so any integer range exports.
    scale, zero = _float_tensor(g, scale), _float_tensor(g, zero_point)
    if axis is not None:
        shape = [1] * symbolic_helper._get_tensor_rank(x)
        shape[axis] = -1
        target = g.op("Constant", value_t=torch.tensor(shape, dtype=torch.int64))
        scale, zero = g.op("Reshape", scale, target), g.op("Reshape", zero, target)
    steps = g.op("Add", g.op("Round", g.op("Mul", x, g.op("Reciprocal", scale))), zero)
    low = g.op("Constant", value_t=torch.tensor(float(quant_min)))
    high = g.op("Constant", value_t=torch.tensor(float(quant_max)))
    return g.op("Mul", g.op("Sub", g.op("Clip", steps, low, high), zero), scale)


@symbolic_helper.parse_args("v", "v", "v", "i", "i", "i")
def fake_quantize_per_channel_affine(g, x, scale, zero_point, axis, quant_min, quant_max):
    return _fake_quantize(g, x, scale, zero_point, axis, quant_min, quant_max)


@symbolic_helper.parse_args("v", "v", "v", "i", "i")
def fake_quantize_per_tensor_affine(g, x, scale, zero_point, quant_min, quant_max):
    return _fake_quantize(g, x, scale, zero_point, None, quant_min, quant_max)


torch.onnx.register_custom_op_symbolic('aten::fake_quantize_per_channel_affine', fake_quantize_per_channel_affine, 13)
torch.onnx.register_custom_op_symbolic('aten::fake_quantize_per_tensor_affine', fake_quantize_per_tensor_affine, 13)
"""

_FAKE_QUANTIZE_ENTRY = (
    Exactness.EXACT,
    ("any integer range; float inputs; the ONNX model holds float arithmetic where QuantizeLinear/"
     "DequantizeLinear pairs would be, so a runtime that fuses QDQ into integer kernels does not see them"),
    _FAKE_QUANTIZE,
    "PyTorch's fake-quantize arithmetic in float ops (any quant_min/quant_max)",
    13,
)

# `&`, `|`, `^` on integers: the TorchScript exporter's symbolics take bool only ("ONNX export does
# NOT support exporting bitwise OR for non-boolean input values") at every opset, though ONNX has
# had BitwiseAnd/Or/Xor since opset 18 and ONNX Runtime runs them for 8- to 64-bit integers.
_BITWISE = """import torch
from torch.onnx._internal.torchscript_exporter import _type_utils

_SCALAR = _type_utils.JitScalarType


def _bitwise(onnx_op, logical_op):
    def symbolic(g, self, other):
        left = _SCALAR.from_value(self, _SCALAR.UNDEFINED)
        right = _SCALAR.from_value(other, _SCALAR.UNDEFINED)
        if left == right == _SCALAR.BOOL:
            return g.op(logical_op, self, other)
        # torch's result type, as the traced node has it (x | 1 stays uint8: a number does not
        # promote); without one, a bool operand takes the other's type.
        result = _SCALAR.from_value(g.original_node.output(), _SCALAR.UNDEFINED)
        if result == _SCALAR.UNDEFINED:
            result = right if left == _SCALAR.BOOL else left
        cast = [g.op("Cast", v, to_i=result.onnx_type()) for v in (self, other)]
        return g.op(onnx_op, *cast)
    return symbolic


for _name, _onnx, _logical in (("and", "BitwiseAnd", "And"), ("or", "BitwiseOr", "Or"), ("xor", "BitwiseXor", "Xor")):
    torch.onnx.register_custom_op_symbolic(f"aten::bitwise_{_name}", _bitwise(_onnx, _logical), 18)
    torch.onnx.register_custom_op_symbolic(f"aten::__{_name}_", _bitwise(_onnx, _logical), 18)
"""

_BITWISE_ENTRY = (
    Exactness.EXACT,
    "integer tensors of 8 to 64 bits (and bool, as And/Or/Xor); opset 18 or later",
    _BITWISE,
    "ONNX BitwiseAnd/BitwiseOr/BitwiseXor (opset 18)",
    18,
)

# F.one_hot without num_classes counts the classes at run time (the largest label plus one); the
# TorchScript exporter writes a OneHot of depth -1, which the checker and ONNX Runtime refuse.
_ONE_HOT = """import torch
from torch.onnx._internal.torchscript_exporter import symbolic_helper


@symbolic_helper.parse_args("v", "i")
def one_hot(g, labels, num_classes):
    if num_classes == -1:
        # As torch counts them: one more than the largest label, computed at run time.
        largest = g.op("ReduceMax", labels, keepdims_i=0)
        depth = g.op("Add", largest, g.op("Constant", value_t=torch.tensor(1, dtype=torch.int64)))
    else:
        depth = g.op("Constant", value_t=torch.tensor(num_classes, dtype=torch.int64))
    values = g.op("Constant", value_t=torch.tensor([0, 1], dtype=torch.int64))
    return g.op("OneHot", labels, depth, values, axis_i=-1)


torch.onnx.register_custom_op_symbolic('aten::one_hot', one_hot, 11)
"""

_ONE_HOT_ENTRY = (
    Exactness.EXACT,
    ("non-negative labels (torch refuses negative ones; ONNX OneHot counts them from the end); "
     "without num_classes the output's last dim is known only at run time"),
    _ONE_HOT,
    "OneHot with its depth computed at run time (the largest label plus one)",
    11,
)

# F.fold (aten::col2im): the TorchScript exporter has no symbolic below opset 18, and its opset-18
# one fails on an output_size traced from shapes ("'NoneType' object is not subscriptable",
# KinWaiCheuk/nnAudio#102). A grouped ConvTranspose with a one-hot kernel adds the same patches.
_COL2IM = """import torch
from torch.onnx._internal.torchscript_exporter import _type_utils, symbolic_helper


def _pairs(values, default):
    values = list(values) if values else [default]
    return values * 2 if len(values) == 1 else values


@symbolic_helper.parse_args("v", "v", "is", "is", "is", "is")
def col2im(g, columns, output_size, kernel_size, dilation, padding, stride):
    # F.fold adds each column's kernel_size patch into the image: a grouped transposed
    # convolution whose kernel is one-hot (input channel c*kh*kw + i*kw + j holds a 1 at (i, j)).
    size = symbolic_helper._maybe_get_const(output_size, "is")
    if symbolic_helper._is_value(size):
        # Sizes computed from shapes while tracing: the traced output's own sizes.
        size = (symbolic_helper._get_tensor_sizes(g.original_node.output()) or [None, None])[-2:]
    if len(size) != 2 or any(not isinstance(s, int) for s in size):
        raise symbolic_helper.errors.SymbolicValueError("col2im: output_size must be known at export time", columns)
    (kh, kw), (dh, dw) = _pairs(kernel_size, 1), _pairs(dilation, 1)
    (ph, pw), (sh, sw) = _pairs(padding, 0), _pairs(stride, 1)
    rank = symbolic_helper._get_tensor_rank(columns)
    sizes = symbolic_helper._get_tensor_sizes(columns) or [None] * (rank or 3)
    blocks = sizes[-2]
    if not isinstance(blocks, int):
        raise symbolic_helper.errors.SymbolicValueError("col2im: the channel dim must be known at export time", columns)
    channels = blocks // (kh * kw)
    rows = (size[0] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    cols = (size[1] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if rank == 2:
        columns = symbolic_helper._unsqueeze_helper(g, columns, [0])
    grid = g.op("Reshape", columns, g.op("Constant", value_t=torch.tensor([-1, blocks, rows, cols])))
    dtype = _type_utils.JitScalarType.from_value(columns, _type_utils.JitScalarType.FLOAT).dtype()
    weight = torch.zeros(blocks, 1, kh, kw, dtype=dtype)
    for block in range(blocks):
        within = block % (kh * kw)
        weight[block, 0, within // kw, within % kw] = 1
    # The output rows and columns no patch reaches (the stride's remainder) as output_padding.
    extra = [size[0] + 2 * ph - ((rows - 1) * sh + dh * (kh - 1) + 1),
             size[1] + 2 * pw - ((cols - 1) * sw + dw * (kw - 1) + 1)]
    image = g.op("ConvTranspose", grid, g.op("Constant", value_t=weight), group_i=channels,
                 kernel_shape_i=[kh, kw], strides_i=[sh, sw], dilations_i=[dh, dw],
                 pads_i=[ph, pw, ph, pw], output_padding_i=extra)
    if rank == 2:
        image = symbolic_helper._squeeze_helper(g, image, [0])
    return image


torch.onnx.register_custom_op_symbolic('aten::col2im', col2im, 9)
"""

_COL2IM_ENTRY = (
    Exactness.ROUNDING,
    ("output_size and the channel dim known at export (the traced sizes: a dynamic output size is "
     "refused); finite inputs: an Inf or NaN in a column reaches the outputs of the other kernel "
     "positions in its group, as 0 x Inf is NaN in the convolution's products"),
    _COL2IM,
    "a grouped ConvTranspose with a one-hot kernel (any opset)",
    9,
)

# A bound of aten::slice read from a tensor in scripted code (`emb[b, :length[b]]` in a
# torch.jit.script function, NeMo's Sortformer, flair's embeddings): the opset-10 symbolic needs its
# rank and refuses one it cannot infer ("Rank must be 0 or 1, not None"), though the schema makes
# every bound an int. Reshaped to one element, each bound is the 1-D input Slice takes.
_SLICE_BOUNDS = """import torch
from torch.onnx._internal.torchscript_exporter import symbolic_helper, symbolic_opset10


def _bound(g, value):
    # A bound read from a tensor in scripted code reaches the symbolic with no known rank; it is
    # one number (aten::slice takes ints), so as a one-element vector it is what Slice takes.
    if not isinstance(value, torch._C.Value) or symbolic_helper._is_none(value) \\
            or not isinstance(value.type(), torch._C.TensorType) or symbolic_helper._get_tensor_rank(value) is not None:
        return value
    vector = g.op("Reshape", value, g.op("Constant", value_t=torch.tensor([1], dtype=torch.int64)))
    vector = g.op("Cast", vector, to_i=7)  # int64, as Slice's other bounds are
    vector.setType(torch._C.TensorType.create_from_tensor(torch.zeros(1, dtype=torch.int64)))
    return vector


def slice_scalar_bounds(g, self, *args):
    if len(args) == 4:  # aten::slice(Tensor self, int dim, int? start, int? end, int step)
        dim, start, end, step = args
        return symbolic_opset10.slice(g, self, dim, _bound(g, start), _bound(g, end), _bound(g, step))
    return symbolic_opset10.slice(g, self, *args)


for opset in range(10, 21):
    torch.onnx.register_custom_op_symbolic('aten::slice', slice_scalar_bounds, opset)
"""

# `x.norm()` in scripted code (a DEQ solver's residual, a scripted loss): TorchScript keeps the
# overloads without dims (aten::norm.Scalar(self, p), .ScalarOpt_dtype(self, p, dtype)), and the
# opset-9 symbolic takes dim and keepdim as required ("norm() missing 2 required positional
# arguments"). Without dims the norm is over every element: the same symbolic, given all of them.
_NORM_ALL = """import torch
from torch.onnx._internal.torchscript_exporter import symbolic_helper, symbolic_opset9


def norm_every_element(g, self, p, *rest):
    if len(rest) >= 2:  # dim and keepdim given: the exporter's own symbolic
        return symbolic_opset9.norm(g, self, p, *rest)
    rank = symbolic_helper._get_tensor_rank(self)
    if rank is None:  # a rank the exporter does not know: one long vector has the same norm
        self = g.op("Reshape", self, g.op("Constant", value_t=torch.tensor([-1])))
        rank = 1
    every = g.op("Constant", value_t=torch.tensor(list(range(rank)), dtype=torch.int64))
    keepdim = g.op("Constant", value_t=torch.tensor(0))
    return symbolic_opset9.norm(g, self, p, every, keepdim, *rest)


for opset in range(9, 21):
    torch.onnx.register_custom_op_symbolic('aten::norm', norm_every_element, opset)
"""

_TORCHSCRIPT_SYMBOLICS = {
    "aten::one_hot": _ONE_HOT_ENTRY,
    "OneHot": _ONE_HOT_ENTRY,  # the checker's finding names the node
    "aten::col2im": _COL2IM_ENTRY,
    "aten::int_repr": (
        Exactness.ROUNDING,
        ("a tensor quantized in the same graph by quantize_per_tensor (written as QuantizeLinear; "
         "what the test covers); off by one at exact ties (x/scale = k + 0.5) when the zero point is "
         "odd: torch rounds x/scale + zero_point half to even, QuantizeLinear rounds x/scale first"),
        _INT_REPR,
        "the QuantizeLinear output it reads",
        10,  # QuantizeLinear's integer output
    ),
    "aten::fake_quantize_per_channel_affine": _FAKE_QUANTIZE_ENTRY,
    "aten::fake_quantize_per_tensor_affine": _FAKE_QUANTIZE_ENTRY,
    **{f"aten::{name}": _BITWISE_ENTRY for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "__and_", "__or_",
                                                     "__xor_", "__and__", "__or__", "__xor__")},
    "aten::slice": (
        Exactness.EXACT,
        ("start, end and step are one number each (as aten::slice's schema has them); other refusals of "
         "the slice symbolic (a step other than 1 before opset 10) are not this one"),
        _SLICE_BOUNDS,
        "a Slice whose bounds are reshaped to one element each (opset 10 or later)",
        10,
    ),
    "aten::norm": (
        Exactness.EXACT,
        ("p of 1 or 2 (the exporter's own symbolic refuses others); a norm over given dims is the "
         "exporter's as before"),
        _NORM_ALL,
        "ReduceL1/ReduceL2 over every dim",
        9,
    ),
}
# Entries for one refusal of an op's symbolic only: the words the refusal has.
_REFUSALS = {"aten::slice": re.compile(r"Rank must be 0 or 1"),
             "aten::norm": re.compile(r"norm\(\) missing 2 required positional arguments")}
# An ONNX node a check names, by the torch op whose symbolic wrote it.
_TORCH_OP_OF = {"OneHot": "aten::one_hot"}
# The ops whose symbolic is offered before the library's rewrite rather than instead of it (the
# rewrite goes through torch.export, which some models' code stops).
_WITH_LIBRARY = frozenset(op for op, entry in _TORCHSCRIPT_SYMBOLICS.items() if entry is _BITWISE_ENTRY)


def _symbolic_rewrite(finding: Finding, ctx: FixContext) -> Fix | None:
    """A short TorchScript symbolic for an op the run_decompositions route cannot reach."""
    entry = _TORCHSCRIPT_SYMBOLICS.get(ctx.op or "")
    if entry is None or ctx.exporter != "torchscript":
        return None
    refusal = _REFUSALS.get(ctx.op or "")
    if refusal is not None and not refusal.search(f"{finding.message} {ctx.export_error}"):
        return None
    exactness, limits, code, mapped_to, lowest = entry
    opset = max(ctx.requested_opset or 13, lowest)
    shown = ctx.op if "::" in (ctx.op or "") else _TORCH_OP_OF.get(ctx.op or "", ctx.op)
    return Fix(
        kind="rewrite",
        title=f"Map {shown} in the TorchScript exporter to {mapped_to} ({exactness.value})",
        snippet=code + f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False, opset_version={opset})\n",
        applicability=Applicability.SAFE,
        cost=f"{shown}: {limits}",
        # Registering a symbolic is process-wide: a worker of its own.
        recipe=Recipe("rewrite", (UseExporter("torchscript"), UseOpset(opset), ExportCode(code)), isolated=True),
    )
