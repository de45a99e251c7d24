"""A batch the export froze, kept by running the model once per sample (OD801-OD804).

Code that walks the batch in Python (`for wav in batch:` around a per-clip front end, a
correlation per sample, `int(x.shape[0])` into a reshape) leaves the trace with the example's
batch: the graph holds one copy of the loop body per example sample. Each copy is right for its
sample, so the model exported at one sample is the per-sample computation, and an ONNX Loop over
dim 0 runs it for any batch (onnxkit.transforms.per_sample_loop). Whether the samples really are
independent is what the check shows: the result is compared with PyTorch at the example's batch
and at every other size the main run checked.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, FrozenSize, Stage
from onnxdoctor.recipe import DeclareDynamic, PerSample, PerSampleLoop, Recipe, UseExporter

CODES = ("OD801", "OD802", "OD803", "OD804")

# The ops a Python loop over a tensor's rows is traced as (`for clip in clips:`).
_ROW_OPS = ("aten::unbind", "aten::split", "aten::chunk", "aten::split_with_sizes")

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import per_sample_loop

# Export one sample (dim 0 of {names} cut to one row, not declared dynamic{others}):
one = {cut}
torch.onnx.export(model, one, 'model.onnx', dynamo={dynamo})
# Then run that graph once per sample: an ONNX Loop over dim 0, the outputs stacked again.
onnx.save(per_sample_loop(onnx.load('model.onnx'), inputs={positions}), 'model.onnx')
"""


def walks_the_batch(finding: Finding) -> bool:
    """Whether the code that froze the size walks it in Python: a `range()` of a size in forward(),
    or a loop over a tensor's rows (traced as unbind/split). Every exporter unrolls such a loop;
    a `len()` alone, strict capture may keep symbolic."""
    detail = finding.detail
    lines = detail.lines if isinstance(detail, FrozenSize) else ()
    return any(kind == "range" for _s, kind, _t in lines) or finding.torch_op in _ROW_OPS


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Where forward() walks the batch in Python, the per-sample export first of the size fixes:
    the loop is what a batched graph cannot keep. Otherwise the `shapes` family proposes it after
    the fixes that keep the batched graph."""
    if not walks_the_batch(finding):
        return []
    fix = per_sample_fix(finding, ctx)
    return [fix] if fix is not None else []


def per_sample_fix(finding: Finding, ctx: FixContext) -> Fix | None:
    """The model exported at one sample and looped over the batch, where dim 0 is what froze."""
    detail = finding.detail
    if not isinstance(detail, FrozenSize) or ctx.target_kind != "script":
        return None
    load = ctx.facts_of(Stage.LOAD)
    order = list(detail.inputs) or list(load.get("forward_parameters") or ())
    positions = tuple(sorted({order.index(name) for name, dim, *_ in detail.dims if dim == 0 and name in order}))
    if not positions:
        return None
    exporter = detail.exporter or ctx.exporter or "dynamo"
    batched = [order[p] for p in positions]
    names = ", ".join(batched)
    kept = [f"{name} dim {dim}" for name, dim, *_ in detail.dims if not (dim == 0 and name in batched)]
    others = f"; declare {', '.join(kept)} dynamic as before" if kept else ""
    last = max(positions) + 1
    cut = ("(" + ", ".join(f"example_inputs[{p}][:1]" if p in positions else f"example_inputs[{p}]" for p in range(last))
           + f", *example_inputs[{last}:])")
    return Fix(
        kind="per_sample",
        title=f"Export one sample and run it once per sample of the batch (an ONNX Loop over dim 0 of {names})",
        snippet=SNIPPET.format(names=names, cut=cut, dynamo=exporter == "dynamo", positions=positions, others=others),
        applicability=Applicability.SAFE,
        cost=("the samples run one after another (no batched kernels); right only if they do not interact, "
              "which the check at every batch size shows"),
        recipe=Recipe("per_sample", (
            PerSample(positions),
            DeclareDynamic(dims=detail.dims, sizes=detail.sizes, inputs=detail.inputs),
            UseExporter(exporter),
            ctx.file_rewrite(PerSampleLoop(positions)),
        )),
    )
