"""Switch exporter: when one torch exporter fails, the other may succeed."""

from __future__ import annotations

import re

from onnxdoctor.analysis.classify import PACKED_WEIGHTS
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.dynamic_shapes import torchscript_declaration
from onnxdoctor.analysis.fixes.scripted import script_module
from onnxdoctor.analysis.fixes.shapes import declaration_snippet
from onnxdoctor.model import Applicability, Finding, Fix, FrozenSize, Stage
from onnxdoctor.recipe import Recipe, UseExporter

# OD208: a script that declares dynamic_axes gets the TorchScript exporter with them as they are
# (torch.onnx's conversion of them for torch.export is what failed); one that declares
# dynamic_shapes gets them converted to dynamic_axes (dynamic_shapes.torchscript_declaration).
# OD210 and OD502 are artefacts of tracing (a frozen value, an int argument made a graph input).
CODES = ("OD201", "OD202", "OD204", "OD205", "OD208", "OD212", "OD299", "OD301", "OD303", "OD304", "OD399",
         "OD210", "OD402", "OD403", "OD499", "OD501", "OD502", "OD599", "OD601", "OD602", "OD603", "OD604",
         "OD901", "OD207",
         # A deployment target that cannot convert an op the export wrote (OpenVINO and Pad's
         # wrap mode, openvino#37772): the other exporter writes the computation in other ops.
         "OD701", "OD702")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The other torch exporter, for failures that belong to one exporter only (a native crash
    inside one exporter too)."""
    if ctx.target_kind != "script" or ctx.exporter is None:
        return []
    if finding.code == "OD901" and "during export" not in finding.message:
        return []
    if finding.code in ("OD701", "OD702") and not finding.message.startswith("[openvino]"):
        return []  # a GPU provider's finding is its table's or the main run's: no fixed model is run there
    if finding.code == "OD207" and (ctx.exporter != "dynamo" or not _torchscript_opset(ctx)):
        # The dynamo exporter could not write the opset asked for (onnx#3805: no Resize adapter
        # down to 9); the TorchScript exporter writes opsets 7-20 itself.
        return []
    settings = ctx.facts_of(Stage.LOAD).get("settings") or {}
    if finding.code == "OD208" and ctx.exporter == "dynamo" and settings.get("dynamic_shapes") and not settings.get(
            "dynamic_axes") and _specialised(ctx):
        # torch.export specialised a declared Dim (a two-layer GRU's time steps, pytorch#126339): the
        # TorchScript exporter with the same dims as dynamic_axes follows them, checked at other sizes.
        # (Dims misnamed or needing bounds are dynamic_shapes.py's corrections, not this.)
        return _declared_for_torchscript(ctx)
    if finding.code == "OD208" and (ctx.exporter != "dynamo" or not settings.get("dynamic_axes")
                                    or settings.get("dynamic_shapes")):
        return []
    other = ctx.other_exporter()
    dynamo = other == "dynamo"
    cost = "the TorchScript exporter is deprecated (opsets 7-20)" if not dynamo else (
        "the dynamo exporter writes opset 18 or newer and needs torch.export to capture the model")
    applicability = Applicability.SAFE
    if not dynamo and script_module(ctx) is not None:
        # A ScriptModule is exported from its script, not traced: its branches stay (ONNX If/Loop).
        cost += "; a ScriptModule keeps its control flow there (ONNX If/Loop), nothing is traced"
    elif finding.code == "OD204" and not dynamo and _packed_weights(ctx):
        cost = ("the TorchScript exporter writes a quantized module's packed weights as QLinear*/QDQ nodes; "
                "check the result at a quantization tolerance")
    elif finding.code == "OD204" and not dynamo:
        # Tracing records only the branch the example input takes.
        cost = ("TorchScript traces the branch the example input takes and bakes it in: other inputs "
                "may need the other branch. Prefer rewriting the condition with torch.cond")
        applicability = Applicability.UNSAFE
    return [
        Fix(
            kind="exporter",
            title=f"Use the {other} exporter (dynamo={dynamo})",
            snippet=f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo={dynamo})\n",
            applicability=applicability,
            cost=cost,
            recipe=Recipe("exporter", (UseExporter(other),)),
        )
    ]


# The opsets the TorchScript exporter writes (torch.onnx's ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET is
# 20; the worker records it only for TorchScript runs, and this path is the dynamo exporter's).
TORCHSCRIPT_OPSETS = range(7, 21)


def _torchscript_opset(ctx: FixContext) -> bool:
    """The opset asked for is one the TorchScript exporter writes."""
    return ctx.requested_opset in TORCHSCRIPT_OPSETS


def _packed_weights(ctx: FixContext) -> bool:
    """torch.export stopped at a quantized module's packed weights (no branch is involved)."""
    export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT and o.error is not None), None)
    return export is not None and export.error is not None and bool(PACKED_WEIGHTS.search(export.error.all_text()))


def _specialised(ctx: FixContext) -> bool:
    """torch.export fixed a declared Dim to one value: its suggested fix is `time = 11`."""
    return any(re.fullmatch(r"\w+ = \d+", str(line)) for line in ctx.export_facts.get("dynamic_shapes_suggested") or ())


def _declared_for_torchscript(ctx: FixContext) -> list[Fix]:
    """The TorchScript exporter with the script's dynamic_shapes as dynamic_axes."""
    declare = torchscript_declaration(ctx)
    if declare is None:
        return []
    return [Fix(
        kind="exporter",
        title="Use the TorchScript exporter (dynamo=False) with the same dims declared as dynamic_axes",
        snippet=declaration_snippet(FrozenSize(dims=declare.dims, inputs=declare.inputs), "torchscript"),
        applicability=Applicability.SAFE,
        cost="the TorchScript exporter is deprecated (opsets 7-20); it traces, so checked at other sizes",
        recipe=Recipe("exporter", (UseExporter("torchscript"), declare)),
    )]
