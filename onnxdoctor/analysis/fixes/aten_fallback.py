"""ATen fallback: only a fix where the target runtime executes ATen nodes (not ONNX Runtime CPU).

A model that already holds ATen fallback nodes (OD401 on org.pytorch.aten::ATen) is answered the
other way round: export again without the fallback, with the op-rewrite library's rewrite for
each aten op the nodes stand for.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import OperatorExportType, Recipe, UseExporter

CODES = ("OD202", "OD203", "OD401")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """ONNX_ATEN_FALLBACK for ops the TorchScript exporter cannot map (tried, rarely a fix)."""
    if finding.code == "OD401":
        return _without_fallback(ctx)
    if ctx.target_kind != "script":
        return []
    return [
        Fix(
            kind="aten_fallback",
            title="ATen fallback (TorchScript exporter): only for runtimes that execute ATen nodes",
            snippet=(
                "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False,\n"
                "                  operator_export_type=torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK)\n"
                "# The op becomes an org.pytorch.aten::ATen node; ONNX Runtime CPU has no kernel for it.\n"
            ),
            applicability=Applicability.DISPLAY_ONLY,
            cost="ONNX Runtime registers no ATen kernel: the model will not load there",
            recipe=Recipe("aten_fallback", (UseExporter("torchscript"), OperatorExportType("ONNX_ATEN_FALLBACK")),
                          isolated=True),
        )
    ]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Why ATen fallback does not help a model meant for ONNX Runtime."""
    if finding.code == "OD401" and not (finding.op or "").startswith("org.pytorch.aten::"):
        return []  # a custom-domain node: ATen fallback has nothing to do with it
    return [
        (
            "ATen fallback (operator_export_type=ONNX_ATEN_FALLBACK) writes ATen nodes that ONNX Runtime "
            "CPU cannot run; it is not a fix for ONNX Runtime."
        )
    ]


def _without_fallback(ctx: FixContext) -> list[Fix]:
    ort_load = next((o for o in ctx.outcomes if o.stage is Stage.ORT_LOAD), None)
    operators = [str(a) for a in ((ort_load.facts.get("aten_operators") if ort_load else None) or ())]
    if not operators:
        return []
    from onnxdoctor.analysis.fixes.rewrite import program_code
    from onnxdoctor.rewrites import find_rewrites

    rewrites = tuple(dict.fromkeys(r for name in operators for r in find_rewrites(f"aten::{name}")))
    covered = sorted({name for name in operators if find_rewrites(f"aten::{name}")})
    snippet = (
        "# Export from the PyTorch model again, without operator_export_type=ONNX_ATEN_FALLBACK.\n"
        + (f"# The library rewrites {', '.join(covered)} in ops ONNX has:\n" + program_code(rewrites)
           + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n"
           if rewrites else "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n")
    )
    missing = sorted(set(operators) - set(covered))
    return [Fix(
        kind="aten_fallback_off",
        title=f"Export again without ATen fallback ({', '.join(f'aten::{o}' for o in operators)})",
        snippet=snippet,
        applicability=Applicability.DISPLAY_ONLY,
        cost=("needs the PyTorch model; onnxdoctor diagnose model.py checks the export"
              + (f"; no rewrite in the library for {', '.join(missing)}: run diagnose on the script to see "
                 "whether an exporter maps it" if missing else "")),
    )]
