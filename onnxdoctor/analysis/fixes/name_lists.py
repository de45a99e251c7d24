"""`input_names` / `output_names` given as one string instead of a list of names.

torch.onnx.export takes a list of names, one per input or output. A bare string is a sequence
too, so each exporter reads it its own way: the TorchScript exporter hands it to a C++ pass that
wants a list and stops with a pybind error ("_jit_pass_onnx_set_dynamic_input_shape(): incompatible
function arguments", Pytorch-UNet#492); the dynamo exporter takes its letters as names ("Input names
cannot be duplicated: ['a']" for "data"). The same name in a list is what was meant.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD299", "OD208", "OD306")

_NAME_SETTINGS = ("input_names", "output_names")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The names as lists, for an export or check that failed with a name setting given as a string."""
    settings = ctx.facts_of(Stage.LOAD).get("settings") or {}
    # (One letter is one name either way.)
    bare = {key: settings[key] for key in _NAME_SETTINGS
            if isinstance(settings.get(key), str) and len(settings[key]) > 1}
    if ctx.target_kind != "script" or not bare or finding.stage not in (Stage.EXPORT, Stage.CHECK):
        return []
    code = "".join(f"{key} = [{value!r}]  # one name per input or output, in a list\n" for key, value in bare.items())
    shown = " and ".join(bare)
    return [Fix(
        kind="name_lists",
        title=f"Give {shown} as a list of names: the exporters take a string as a sequence of letters "
              "(the TorchScript one then refuses it, the dynamo one names each input a letter)",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx', "
        + ", ".join(f"{key}={key}" for key in bare) + ")\n",
        applicability=Applicability.SAFE,
        cost="none: the names you meant",
        recipe=Recipe("name_lists", (LoadCode(code),)),
    )]
