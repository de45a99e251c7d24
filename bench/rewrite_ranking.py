"""Rank the aten ops no exporter maps by how often real model code calls them.

Which ops: the dynamo gaps of bench/registry_gaps.py (out= overloads left out: their schema
writes into an argument), the ops torch's TorchScript exporter has no symbolic for at opset 20
while the dynamo exporter maps them (there the fix is the exporter), and TORCHSCRIPT_REFUSALS /
SILENTLY_WRONG: arguments a registered function refuses or gets wrong (scatter_reduce's mean).
The registry says what has no function; only an export says what fails: `--check` exports a
probe call of each ranked op (PROBES) with both exporters, runs it in ONNX Runtime and compares
with eager, so each row reads rewrite / exporter / exports as is / not covered (NOT_COVERED
says why).

Which code: the installed transformers, timm and torchvision (those installed), torch's own
torch/nn/functional.py and torch/nn/modules/, and fixtures/corpus/*.py. Call sites are counted by
an AST walk; a Python-level name is mapped to an aten op as follows:

- `torch.X(...)` -> X; `torch.linalg.X(...)` -> linalg_X; `torch.special.X(...)` -> special_X;
  `F.X(...)`, `nn.functional.X(...)`, `torch.nn.functional.X(...)` -> X;
  `torch.ops.aten.X(...)` and `torch.ops.aten.X.overload(...)` -> X;
  `<expr>.X(...)` -> X when torch.Tensor has a method X (a method of that name on another type,
  `list.sort()`, `dict.values()`, is counted too: the ranking over-counts such common names, which
  is why ops whose only gap overload needs a particular argument are counted by that argument);
- the name X is then looked up in ALIASES (the Python API's name -> the aten op it reaches when
  the exporter sees it, e.g. linalg_svd -> _linalg_svd, unique -> _unique2) and otherwise taken as
  the aten op's name;
- an overload that only particular arguments reach (ARGUMENT_OVERLOADS: `view(torch.int32)` ->
  view.dtype, `squeeze((0, 2))` -> squeeze.dims, `scatter(..., reduce=...)` -> scatter.reduce,
  `scatter_reduce(..., "mean")` -> that mode) counts only the call sites that pass them.

Usage: python bench/registry_gaps.py is the list; this script is the order:
    python bench/rewrite_ranking.py [--top 60] [--markdown] [--check]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import torch
from registry_gaps import gaps

from onnxdoctor.rewrites import REWRITES, find_rewrites

# Python-level name -> the aten op the exporters see. torch's Python API often reaches a
# differently named aten op (CompositeImplicitAutograd wrappers, linalg's underscored kernels).
ALIASES = {
    "svd": "_linalg_svd", "linalg_svd": "_linalg_svd", "linalg_svdvals": "_linalg_svd",
    "svd_lowrank": "_linalg_svd", "pca_lowrank": "_linalg_svd",
    "linalg_eigh": "_linalg_eigh", "linalg_eigvalsh": "_linalg_eigh",
    "linalg_eigvals": "_linalg_eigvals", "linalg_eig": "linalg_eig",
    "det": "_linalg_det", "linalg_det": "_linalg_det",
    "slogdet": "_linalg_slogdet", "logdet": "_linalg_slogdet", "linalg_slogdet": "_linalg_slogdet",
    "linalg_solve": "_linalg_solve_ex", "linalg_solve_ex": "_linalg_solve_ex",
    "inverse": "linalg_inv_ex", "linalg_inv": "linalg_inv_ex", "linalg_inv_ex": "linalg_inv_ex",
    "cholesky": "cholesky", "linalg_cholesky": "linalg_cholesky_ex",
    "linalg_cholesky_ex": "linalg_cholesky_ex",
    "pinverse": "linalg_pinv", "linalg_pinv": "linalg_pinv",
    "qr": "linalg_qr", "linalg_qr": "linalg_qr",
    "matrix_exp": "linalg_matrix_exp", "linalg_matrix_exp": "linalg_matrix_exp",
    "linalg_lu": "linalg_lu", "linalg_lu_factor": "linalg_lu_factor_ex", "lu": "linalg_lu_factor_ex",
    "linalg_lu_solve": "linalg_lu_solve", "lu_solve": "linalg_lu_solve",
    "linalg_solve_triangular": "linalg_solve_triangular",
    "linalg_householder_product": "linalg_householder_product", "orgqr": "linalg_householder_product",
    "adaptive_avg_pool2d": "_adaptive_avg_pool2d", "adaptive_avg_pool3d": "_adaptive_avg_pool3d",
    "adaptive_max_pool1d": "adaptive_max_pool2d",
    "rrelu": "rrelu_with_noise",
    "unique": "_unique2", "unique_consecutive": "unique_consecutive",
    "grid_sample": "grid_sampler_3d",  # only its 5-D inputs reach the gap: see ARGUMENT_OVERLOADS
    "special_erfinv": "erfinv", "special_digamma": "digamma", "special_psi": "digamma",
    "special_polygamma": "polygamma", "special_gammaln": "lgamma", "special_i0": "i0",
    "special_gammainc": "igamma", "special_gammaincc": "igammac", "gammainc": "igamma",
    "gammaincc": "igammac", "special_multigammaln": "lgamma", "mvlgamma": "lgamma",
    "cdist": "_cdist_forward", "pdist": "_pdist_forward",
    "median": "median", "nanmedian": "nanmedian", "kthvalue": "kthvalue", "mode": "mode",
    "fractional_max_pool2d": "fractional_max_pool2d",
    "multinomial": "multinomial",
}


@dataclass(frozen=True)
class CallSite:
    """One call in source code: the Python-level name and the AST node (for argument checks)."""

    name: str
    node: ast.Call


def _dtype_argument(node: ast.Call) -> bool:
    """`x.view(torch.float16)`, `x.view(dtype=...)`: a dtype, not a shape."""
    args = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
    return len(args) == 1 and (
        (isinstance(args[0], ast.Attribute) and args[0].attr in _DTYPE_NAMES)
        or (isinstance(args[0], ast.Name) and "dtype" in args[0].id.lower())
        or (isinstance(args[0], ast.Attribute) and args[0].attr == "dtype")
    )


_DTYPE_NAMES = {n for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)}


def _keyword(name: str) -> Callable[[ast.Call], bool]:
    return lambda node: any(k.arg == name for k in node.keywords)


def _scatter_reduce_mode(*modes: str) -> Callable[[ast.Call], bool]:
    def check(node: ast.Call) -> bool:
        values = [*node.args, *(k.value for k in node.keywords if k.arg == "reduce")]
        return any(isinstance(v, ast.Constant) and v.value in modes for v in values)

    return check


def _tuple_argument(node: ast.Call) -> bool:
    return any(isinstance(a, ast.Tuple | ast.List) for a in node.args) or any(
        k.arg == "dim" and isinstance(k.value, ast.Tuple | ast.List) for k in node.keywords
    )


def _five_d_grid(node: ast.Call) -> bool:
    # A static source cannot see ranks; volumetric code says so in its names.
    return any("3d" in ast.unparse(a).lower() or "volume" in ast.unparse(a).lower() for a in node.args)


# aten overload -> (Python name, a check on the call site). Only sites passing the check count.
ARGUMENT_OVERLOADS: dict[str, tuple[str, Callable[[ast.Call], bool]]] = {
    "aten::view.dtype": ("view", _dtype_argument),
    "aten::squeeze.dims": ("squeeze", _tuple_argument),
    "aten::scatter.reduce": ("scatter", _keyword("reduce")),
    "aten::scatter.value_reduce": ("scatter", _keyword("reduce")),
    "aten::mm.dtype": ("mm", _keyword("out_dtype")),
    "aten::bmm.dtype": ("bmm", _keyword("out_dtype")),
    "aten::addmm.dtype": ("addmm", _keyword("out_dtype")),
    "aten::grid_sampler_3d.default": ("grid_sample", _five_d_grid),
    "aten::sort.stable": ("sort", _keyword("stable")),
    "aten::rand.generator": ("rand", _keyword("generator")),
    "aten::randn.generator": ("randn", _keyword("generator")),
    "aten::randint.generator": ("randint", _keyword("generator")),
    "aten::randint.low_generator": ("randint", _keyword("generator")),
    "aten::randperm.generator": ("randperm", _keyword("generator")),
    "aten::rand_like.generator": ("rand_like", _keyword("generator")),
    "aten::randn_like.generator": ("randn_like", _keyword("generator")),
    "aten::randint_like.generator": ("randint_like", _keyword("generator")),
    "aten::scatter_reduce.two[mean]": ("scatter_reduce", _scatter_reduce_mode("mean")),
    "aten::scatter_reduce.two[include_self=False]": ("scatter_reduce", _keyword("include_self")),
}

# Ops a registered TorchScript symbolic refuses for some arguments while the dynamo exporter maps
# them (symbolic_opset16.scatter_reduce: "ONNX does not support mean reduction"): the fix is the
# exporter. The dynamo registry has no such refusals among the ops ranked here (checked by export).
TORCHSCRIPT_REFUSALS = ("aten::scatter_reduce.two[include_self=False]",)
# Refused by the TorchScript symbolic and exported with wrong numbers by the dynamo exporter
# (a plain ScatterElements, no averaging; torch 2.13): only a rewrite helps.
SILENTLY_WRONG = ("aten::scatter_reduce.two[mean]",)

# A call of each ranked op on `x` (a 3 x 4 float tensor) for --check; the names it may use are
# those of _probe_scope(). Ops without one are in NOT_COVERED.
PROBES = {
    "aten::histc": "torch.histc(x, 5)",
    "aten::masked_select": "torch.masked_select(x, x > 0)",
    "aten::expm1": "torch.expm1(x)",
    "aten::bucketize": "torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0]))",
    "aten::linalg_solve_triangular": "torch.linalg.solve_triangular(x[:, :3].triu() + 3 * torch.eye(3), x, upper=True)",
    "aten::randint_like": "torch.randint_like(x, 5).shape[0] * x",
    "aten::_cdist_forward": "torch.cdist(x, x.flip(0))",
    "aten::unique_consecutive": "torch.unique_consecutive(x.round())",
    "aten::var": "torch.var(x, 1)",
    "aten::resize": "x.clone().resize_(2, 2)",
    "aten::cummax": "torch.cummax(x, 1)",
    "aten::searchsorted": "torch.searchsorted(torch.tensor([0.0, 1.0]), x)",
    "aten::cumprod": "torch.cumprod(x, 1)",
    "aten::_adaptive_avg_pool2d": "F.adaptive_avg_pool2d(x.reshape(1, 1, 3, 4), (2, 3))",
    "aten::bernoulli": "torch.bernoulli(torch.zeros_like(x)) + x",
    "aten::adaptive_max_pool2d": "F.adaptive_max_pool2d(x.reshape(1, 1, 3, 4), (2, 3))",
    "aten::cummin": "torch.cummin(x, 1)",
    "aten::kthvalue": "torch.kthvalue(x, 2, 1)",
    "aten::lgamma": "torch.lgamma(x.abs() + 0.5)",
    "aten::linalg_inv_ex": "torch.linalg.inv(x[:, :3] + 3 * torch.eye(3))",
    "aten::sinc": "torch.sinc(x)",
    "aten::_linalg_det": "torch.linalg.det(x[:, :3])",
    "aten::_linalg_svd": "torch.linalg.svd(x, full_matrices=False)[1]",
    "aten::atanh": "torch.atanh(x.tanh())",
    "aten::erfc": "torch.special.erfc(x)",
    "aten::exp2": "torch.exp2(x)",
    "aten::rrelu_with_noise": "F.rrelu(x, training=False)",
    "aten::squeeze.dims": "x.unsqueeze(0).unsqueeze(2).squeeze((0, 2))",
    "aten::_adaptive_avg_pool3d": "F.adaptive_avg_pool3d(x.reshape(1, 1, 1, 3, 4), (1, 2, 3))",
    "aten::_linalg_eigh": "torch.linalg.eigvalsh(x[:, :3] @ x[:, :3].T)",
    "aten::_linalg_slogdet": "torch.linalg.slogdet(x[:, :3])[1]",
    "aten::_linalg_solve_ex": "torch.linalg.solve(x[:, :3] + 3 * torch.eye(3), x)",
    "aten::_native_multi_head_attention": "MHA(x[None], x[None], x[None])[0]",
    "aten::_transformer_encoder_layer_fwd": "ENCODER(x[None])",
    "aten::adaptive_max_pool3d": "F.adaptive_max_pool3d(x.reshape(1, 1, 1, 3, 4), (1, 2, 3))",
    "aten::asinh": "torch.asinh(x)",
    "aten::bincount": "torch.bincount((x.abs() * 3).to(torch.int64).reshape(-1))",
    "aten::copysign": "torch.copysign(x, x.flip(0))",
    "aten::empty_strided": "torch.empty_strided((3, 4), (4, 1)).zero_() + x",
    "aten::grid_sampler_3d.default": "F.grid_sample(x.reshape(1, 1, 1, 3, 4), x[:2, :3].reshape(1, 1, 1, 2, 3).tanh(), align_corners=False)",
    "aten::hamming_window": "x * torch.hamming_window(4)",
    "aten::isneginf": "torch.isneginf(x.log())",
    "aten::ldexp": "torch.ldexp(x, torch.tensor([1, 2, 3, 4]))",
    "aten::linalg_cholesky_ex": "torch.linalg.cholesky(x[:, :3] @ x[:, :3].T + torch.eye(3))",
    "aten::mode": "torch.mode(x.round(), 1)",
    "aten::sort.stable": "torch.sort(x, stable=True)",
    "aten::scatter_reduce.two[include_self=False]": "x.scatter_reduce(0, IDX, x[:2], 'amax', include_self=False)",
    "aten::scatter_reduce.two[mean]": "x.scatter_reduce(0, IDX, x[:2] * 2, 'mean')",
    "aten::scatter.reduce": "x.scatter(0, IDX, x[:2], reduce='add')",
    "aten::index_reduce": "x.index_reduce(0, torch.tensor([0, 2]), x[:2], 'amax')",
}

# Ranked ops no rewrite here covers, and why (complex-valued ops are left to the complex-number
# work of issue 22 §4b; random ops cannot be checked against eager: no exporter reproduces
# torch's generator stream).
NOT_COVERED = {
    "aten::view.dtype": "a bit reinterpretation (mostly in quantized-weight loading code); ONNX "
    "has it only as BitCast from opset 26, which the exporters do not write",
    "aten::view_as_real": "complex-valued: view_as_real rewrites belong to issue 22 §4b",
    "aten::view_as_complex": "complex-valued: issue 22 §4b",
    "aten::complex": "complex-valued: issue 22 §4b",
    "aten::polar": "complex-valued: issue 22 §4b",
    "aten::randperm": "random: a rewrite (argsort of torch.rand) has the same distribution but no "
    "export reproduces torch's numbers, so no check against eager can pass",
    "aten::randperm.generator": "random, with a torch.Generator: as randperm",
    "aten::rand.generator": "random, with a torch.Generator: drop `generator=` (dynamo maps "
    "rand); the numbers differ from eager either way",
    "aten::randn.generator": "as rand.generator",
    "aten::randint.generator": "as rand.generator",
    "aten::randint.low_generator": "as rand.generator",
    "aten::_scaled_mm": "FP8 matrix product with a CUDA-only kernel: export the dequantized model",
    "aten::_scaled_mm_v2": "as _scaled_mm",
    "aten::_grouped_mm": "grouped (MoE) matrix product with offsets read from a tensor (the "
    "group sizes are data); CUDA kernels only in torch 2.13",
    "aten::mm.dtype": "no CPU kernel in torch 2.13 (CUDA only): a model calling it cannot run "
    "the eager reference a rewrite is checked against",
    "aten::equal": "returns a Python bool read by Python control flow: torch.export and the "
    "tracer cannot capture it; write `(a == b).all()` (a tensor) in the model",
    "aten::fractional_max_pool2d": "draws random window offsets on every call (even in eval): "
    "nothing to check against eager",
    "aten::quantize_per_tensor": "quantized tensors: the quantized-model route of issue 22 §4b "
    "(export the float model, quantize the ONNX model)",
}


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


_TENSOR_METHODS = {n for n in dir(torch.Tensor) if not n.startswith("__")}
_FUNCTIONAL_PREFIXES = ("F", "nn.functional", "torch.nn.functional", "functional")


def python_name(call: ast.Call) -> str | None:
    """The Python-level op name of a call, per the module docstring's rules (None: not an op)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    dotted = _dotted(func)
    if dotted is not None:
        prefix, _, name = dotted.rpartition(".")
        if prefix == "torch":
            return name
        if prefix in ("torch.linalg", "linalg"):
            return f"linalg_{name}"
        if prefix in ("torch.special", "special"):
            return f"special_{name}"
        if prefix in _FUNCTIONAL_PREFIXES:
            return name
        if prefix.startswith("torch.ops.aten"):
            return prefix.split(".")[3] if prefix.count(".") >= 3 else name
        if prefix.startswith(("torch.", "np", "numpy", "math", "os", "re", "json")):
            return None
    return func.attr if func.attr in _TENSOR_METHODS else None


def call_sites(path: Path) -> Iterator[CallSite]:
    """Every op-like call in one Python file (files that do not parse are skipped)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = python_name(node)
            if name is not None:
                yield CallSite(name, node)


# Files of a package that are not model code: image and text pre-processing (PIL and numpy
# calls whose method names collide with Tensor's: `image.resize`), conversion scripts, the CLI,
# pipelines and data collators.
NOT_MODEL_CODE = ("image_processing", "video_processing", "processing_", "tokenization",
                  "feature_extraction", "convert_", "modular_")
NOT_MODEL_DIRS = {"commands", "pipelines", "data", "cli"}


def _model_code(path: Path, package_root: Path) -> bool:
    parts = path.relative_to(package_root).parts
    return not path.name.startswith(NOT_MODEL_CODE) and not NOT_MODEL_DIRS & set(parts[:-1])


def sources() -> dict[str, list[Path]]:
    """The code bases searched, those installed, by name."""
    found: dict[str, list[Path]] = {}
    for package in ("transformers", "timm", "torchvision"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            root = Path(spec.origin).parent
            found[package] = sorted(p for p in root.rglob("*.py") if _model_code(p, root))
    nn = Path(torch.__file__).parent / "nn"
    found["torch.nn"] = [nn / "functional.py", *sorted((nn / "modules").rglob("*.py"))]
    found["corpus"] = sorted((ROOT / "fixtures" / "corpus").glob("*.py"))
    return found


def is_out_overload(qualified: str) -> bool:
    """An overload writing into an argument (`kthvalue.values`, `max.dim_max`): never exported."""
    name, _, overload = qualified.removeprefix("aten::").partition(".")
    schema = getattr(getattr(torch.ops.aten, name), overload)._schema
    return any(a.is_out for a in schema.arguments)


def torchscript_only_gaps(names: set[str]) -> list[str]:
    """Called ops the TorchScript exporter has no symbolic for (opset 20) that dynamo maps."""
    import importlib

    # The TorchScript registry is filled by importing its symbolic modules.
    for version in range(7, 21):
        importlib.import_module(f"torch.onnx._internal.torchscript_exporter.symbolic_opset{version}")
    from torch.onnx._internal.exporter import _registration
    from torch.onnx._internal.torchscript_exporter.registration import registry as ts

    dynamo = _registration.ONNXRegistry.from_torchlib()
    found = []
    for name in sorted(names):
        op = ALIASES.get(name, name)
        packet = getattr(torch.ops.aten, op, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket) or ts.is_registered_op(f"aten::{name}", 20):
            continue
        if ts.is_registered_op(f"aten::{op}", 20):
            continue
        default = getattr(packet, "default", None)
        if default is None or not dynamo.is_registered(default):
            continue
        # CompositeImplicitAutograd ops are traced into their parts by TorchScript too.
        if torch._C._dispatch_has_kernel_for_dispatch_key(default.name(), "CompositeImplicitAutograd"):
            continue
        found.append(f"aten::{op}.default")
    return found


@dataclass(frozen=True)
class Ranked:
    """One op of the ranking: its overloads, call-site counts per code base, coverage."""

    op: str  # aten::name
    overloads: tuple[str, ...]
    counts: dict[str, int]
    covered: str  # "rewrite", "exporter" or ""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def rank() -> list[Ranked]:
    """Every gap with its call-site counts, most called first."""
    code = sources()
    per_source: dict[str, Counter[str]] = {}
    argument_hits: dict[str, Counter[str]] = {}
    for source, files in code.items():
        counter: Counter[str] = Counter()
        hits: Counter[str] = Counter()
        for path in files:
            for site in call_sites(path):
                counter[site.name] += 1
                for overload, (name, check) in ARGUMENT_OVERLOADS.items():
                    if site.name == name and check(site.node):
                        hits[overload] += 1
        per_source[source] = counter
        argument_hits[source] = hits
    called = set().union(*per_source.values())

    dynamo_gaps = [g for g in gaps() if not is_out_overload(g)]
    ts_gaps = [*torchscript_only_gaps(called), *TORCHSCRIPT_REFUSALS]
    dynamo_gaps += SILENTLY_WRONG
    rewritten = {t.replace("aten.", "aten::", 1) for r in REWRITES for t in r.targets}
    by_op: dict[str, list[str]] = {}
    for overload in [*dynamo_gaps, *ts_gaps]:
        key = overload if overload in ARGUMENT_OVERLOADS else overload.split(".")[0]
        by_op.setdefault(key, []).append(overload)

    names_for: dict[str, set[str]] = {}
    for name in called:
        names_for.setdefault(f"aten::{ALIASES.get(name, name)}", set()).add(name)
        names_for.setdefault(f"aten::{name}", set()).add(name)
    ranked = []
    for key, overloads in by_op.items():
        counts = {}
        for source in code:
            if key in ARGUMENT_OVERLOADS:
                counts[source] = argument_hits[source][key]
            else:
                counts[source] = sum(per_source[source][n] for n in names_for.get(key, ()))
        # A rewrite covers the op when it names one of the Python-level names counted for it
        # (the exported program keeps linalg_svd where the registry lists _linalg_svd).
        names = names_for.get(key, set()) | {key.split("[")[0]}
        by_name = {r.op for n in names for r in find_rewrites(n if n.startswith("aten::") else f"aten::{n}")}
        if all(o.split("[")[0] in rewritten for o in overloads) or by_name:
            covered = "rewrite"
        elif key in ts_gaps or any(o in ts_gaps for o in overloads):
            covered = "exporter"
        else:
            covered = ""
        ranked.append(Ranked(key, tuple(overloads), counts, covered))
    ranked.sort(key=lambda r: (-r.total, r.op))
    return ranked


def _probe_scope() -> dict[str, object]:
    import torch.nn.functional as F

    return {
        "torch": torch, "F": F, "IDX": torch.tensor([[0, 1, 2, 0], [1, 0, 2, 2]]),
        "MHA": torch.nn.MultiheadAttention(4, 2, batch_first=True).eval(),
        "ENCODER": torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval(),
    }


def _random(op: str) -> bool:
    """A probe whose numbers are random or uninitialised: only shapes can be compared."""
    return op in PROBES and any(w in PROBES[op] for w in ("rand", "bernoulli", "empty"))


def check(op: str, dynamo: bool) -> str:
    """Export PROBES[op] with one exporter and run it in ONNX Runtime: "ok", "wrong" (runs,
    differs from eager) or "fails" (the export or the session raised)."""
    import contextlib
    import io
    import tempfile

    import numpy as np
    import onnxruntime as ort

    scope = _probe_scope()
    call = eval(f"lambda x: {PROBES[op]}", scope)

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return call(x)

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        path = f"{tmp}/probe.onnx"
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(Probe().eval(), (x,), path, dynamo=dynamo,
                                  **({} if dynamo else {"opset_version": 17}))
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feeds = {i.name: x.numpy() for i in session.get_inputs()}
            got = session.run(None, feeds)
        except Exception:  # noqa: BLE001  (any failure is the answer)
            return "fails"
        expected = [t for t in torch.utils._pytree.tree_leaves(Probe()(x)) if isinstance(t, torch.Tensor)]
        if _random(op):  # a random op's numbers cannot match: shapes only
            same = all(g.shape == tuple(e.shape) for g, e in zip(got, expected, strict=False))
        else:
            same = len(got) == len(expected) and all(
                g.shape == tuple(e.shape) and np.allclose(g, e.numpy(), atol=1e-4, rtol=1e-4, equal_nan=True)
                for g, e in zip(got, expected, strict=False))
        return "ok" if same else "wrong"


def status(entry: Ranked, checks: dict[str, tuple[str, str]]) -> str:
    """One row's verdict: rewrite, exporter, exports as is, or not covered (and why)."""
    if entry.covered == "rewrite":
        return "rewrite"
    if entry.op in NOT_COVERED:
        return "not covered: " + NOT_COVERED[entry.op]
    if entry.op in checks:
        dynamo, torchscript = checks[entry.op]
        random = "; random: shapes only" if _random(entry.op) else ""
        if dynamo == "ok" and torchscript == "ok":
            return f"exports as is (both exporters, checked{random})"
        if dynamo == "ok":
            return f"exporter: dynamo exports it (checked{random}); TorchScript {torchscript}"
        return f"not covered: dynamo {dynamo}, TorchScript {torchscript}"
    return entry.covered or "not covered (no probe)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=0, help="print only the N most called")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (docs/rewrites.md)")
    parser.add_argument("--check", action="store_true",
                        help="export each shown op's probe with both exporters (a few seconds each)")
    parser.add_argument("--uncalled", nargs="*",
                        default=[*SILENTLY_WRONG, "aten::scatter.reduce", "aten::index_reduce"],
                        help="ops to show after the ranking even with no call site")
    args = parser.parse_args()
    everything = rank()
    ranked = [r for r in everything if r.total > 0]
    shown = ranked[: args.top] if args.top else ranked
    shown += [r for r in everything if r.total == 0 and r.op in args.uncalled]
    checks: dict[str, tuple[str, str]] = {}
    if args.check:
        for r in shown:
            if r.op in PROBES and r.covered != "rewrite" and r.op not in NOT_COVERED:
                checks[r.op] = (check(r.op, dynamo=True), check(r.op, dynamo=False))
                print(f"checked {r.op}: dynamo {checks[r.op][0]}, TorchScript {checks[r.op][1]}",
                      file=sys.stderr, flush=True)
    sources_ = list(shown[0].counts) if shown else []
    if args.markdown:
        print("| # | op | calls | " + " | ".join(sources_) + " | status |")
        print("|---|---|---|" + "---|" * len(sources_) + "---|")
    verdicts = [status(r, checks) for r in shown]
    for i, (r, verdict) in enumerate(zip(shown, verdicts, strict=True), 1):
        if args.markdown:
            print(f"| {i} | `{r.op}` | {r.total} | " + " | ".join(str(r.counts[s]) for s in sources_)
                  + f" | {verdict} |")
        else:
            detail = " ".join(f"{s}={r.counts[s]}" for s in sources_ if r.counts[s])
            print(f"{i:3d} {r.op:45s} {r.total:5d}  {detail:40s} {verdict}")
    done = sum(not v.startswith("not covered") for v in verdicts)
    print(f"\n{len(ranked)} gaps called at least once; of the {len(shown)} shown, {done} covered "
          "(rewrite, exporter, or exports as is)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
