"""Session options that make ONNX Runtime run the model as written: QDQ pairs, dropout kept on,
a graph rewrite whose fused node fails or differs turned off.

ONNX Runtime's graph optimizer fuses DequantizeLinear -> op -> QuantizeLinear into an integer
kernel (QGemm, QLinearMatMul, ...). Those kernels round differently, and on x86 CPUs without VNNI
uint8 x int8 products can saturate, so a fake-quantized model (QAT `fake_quantize_*`, or a float
model rounding to fixed grids) that matches PyTorch with the optimizer off can differ by several
quantization steps with it on. The session configuration entry `session.disable_quant_qdq` turns
off only that fusion: every other optimization stays, the Q/DQ pairs run as the ONNX model writes
them (in float), and the model file is unchanged. Verified like any fix: the same export, run
with that entry, compared with PyTorch.
"""

from __future__ import annotations

import re
from typing import Any

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.protocol import provenance_table
from onnxdoctor.recipe import Recipe, SessionConfig

CODES = ("OD601", "OD603", "OD501")

# A node ONNX Runtime's optimizer made, named after the rewrite that made it
# ('/Mul/SimplifiedLayerNormFusion/', onnxruntime#31980).
_FUSED_BY = re.compile(r"(?<![A-Za-z0-9])([A-Z][A-Za-z0-9]*Fusion)(?![A-Za-z0-9])")

DISABLE_QDQ_FUSION = (("session.disable_quant_qdq", "1"),)

SNIPPET = '''import onnxruntime

options = onnxruntime.SessionOptions()
# Run QuantizeLinear/DequantizeLinear as written: ONNX Runtime's QDQ fusion into integer kernels
# rounds differently from the model (and from PyTorch). Other optimizations stay on.
options.add_session_config_entry("session.disable_quant_qdq", "1")
session = onnxruntime.InferenceSession("model.onnx", options, providers=["CPUExecutionProvider"])
'''


def has_qdq_pairs(op_types: list[str] | tuple[str, ...]) -> bool:
    """Whether a graph (its `ai.onnx::Op` list) holds Q/DQ pairs ONNX Runtime would fuse, and no
    integer QLinear* nodes (those the entry does not change)."""
    names = {str(t).rsplit("::", 1)[-1] for t in op_types}
    return {"QuantizeLinear", "DequantizeLinear"} <= names and not any(n.startswith("QLinear") for n in names)


# ONNX Runtime's graph optimizer removes Dropout nodes (the EliminateDropout rewrite), the ones
# told to drop included: a model that keeps dropout on at inference (Monte Carlo dropout) then
# returns the same numbers on every run. Naming the rule in this entry keeps the masks.
# The session entry that turns named graph rewrites off, every other optimization left on.
_REWRITES_OFF = "optimization.disable_specified_optimizers"


def _rewrite_off_snippet(rewrite: str, why: str) -> str:
    """A session created with one of ONNX Runtime's graph rewrites off; `why` the comment lines."""
    return ("import onnxruntime\n\n"
            "options = onnxruntime.SessionOptions()\n"
            f"{why}"
            f'options.add_session_config_entry("{_REWRITES_OFF}", "{rewrite}")\n'
            'session = onnxruntime.InferenceSession("model.onnx", options, providers=["CPUExecutionProvider"])\n')


KEEP_DROPOUT = ((_REWRITES_OFF, "EliminateDropout"),)

DROPOUT_SNIPPET = _rewrite_off_snippet(
    "EliminateDropout",
    "# Keep the Dropout nodes the model told to drop: ONNX Runtime's EliminateDropout rewrite removes\n"
    "# them, and every run then returns the same numbers. Other optimizations stay on.\n")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Turn off the ONNX Runtime rewrite that made a failing or differing node; disable its QDQ
    fusion for a mismatching model holding Q/DQ pairs; keep the Dropout nodes of a model whose
    random outputs differ in distribution."""
    export = next((o.facts for o in ctx.outcomes if o.stage is Stage.EXPORT), {})
    fused = _FUSED_BY.search(finding.node or "")
    made = [_without_rewrite(fused.group(1))] if (
        fused and finding.stage in (Stage.ORT_RUN, Stage.PARITY) and _not_exported(finding.node, export)) else []
    if finding.stage is not Stage.PARITY:
        return made
    return made + _parity_options(export, ctx)


def _not_exported(node: str | None, export: dict[str, Any]) -> bool:
    """A node the exported file does not hold (the exporter's own names are in the provenance
    table): one ONNX Runtime's optimizer made, not a module of the user's named `...Fusion`."""
    table = provenance_table(export)
    return bool(node) and bool(table) and node not in table


def _parity_options(export: dict[str, Any], ctx: FixContext) -> list[Fix]:
    """QDQ fusion off for a model holding Q/DQ pairs; Dropout kept for random outputs."""
    drawn = ctx.parity_facts.get("random") if isinstance(ctx.parity_facts.get("random"), dict) else {}
    if "Dropout" in (drawn.get("ops") or ()) and drawn.get("matched") is False:
        return [Fix(
            kind="ort_options",
            title="Run the model with ONNX Runtime's EliminateDropout rewrite off, so the Dropout nodes the "
                  "model keeps on draw their masks",
            snippet=DROPOUT_SNIPPET,
            applicability=Applicability.SAFE,
            cost=("the model file is unchanged; every session that runs it must set the entry; the outputs are "
                  "random, as PyTorch's are (compared in distribution)"),
            recipe=Recipe("ort_options", (SessionConfig(KEEP_DROPOUT),)),
        )]
    if not has_qdq_pairs(export.get("op_types") or ()):
        return []
    return [Fix(
        kind="ort_options",
        title="Run the model with ONNX Runtime's QDQ fusion off (session.disable_quant_qdq = 1)",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost=("the Q/DQ pairs run in float as written instead of ONNX Runtime's fused integer kernels: "
              "slower where those kernels would have been used; the model file is unchanged, every "
              "session that runs it must set the entry"),
        recipe=Recipe("ort_options", (SessionConfig(DISABLE_QDQ_FUSION),)),
    )]


def _without_rewrite(rewrite: str) -> Fix:
    """The model run with one of ONNX Runtime's graph rewrites off: the node that failed (or
    differs) is one it made, not one of the model's."""
    snippet = _rewrite_off_snippet(
        rewrite,
        f"# The failing node is one ONNX Runtime's {rewrite} rewrite made, not one of the model's:\n"
        "# turn that rewrite off. Other optimizations stay on.\n")
    return Fix(
        kind="ort_options",
        title=f"Run the model with ONNX Runtime's {rewrite} rewrite off: the failing node is one it made",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost=("the model file is unchanged; every session that runs it must set the entry; the nodes that rewrite "
              "would have fused run unfused"),
        recipe=Recipe("ort_options", (SessionConfig(((_REWRITES_OFF, rewrite),)),)),
    )
