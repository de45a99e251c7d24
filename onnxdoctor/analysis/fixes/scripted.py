"""A ScriptModule model (torch.jit.script, torch.jit.load): export what the exporters take instead.

The dynamo exporter refuses a ScriptModule outright ("Exporting a ScriptModule is not
supported"), and the TorchScript exporter refuses one whose forward() has optional arguments the
example leaves out ("args contained 1 None's after flattening"). The routes, each verified:
the eager class the script defines, with the scripted model's weights (both exporters take it);
torch's TorchScript-to-torch.export converter, then the dynamo exporter; a scripted wrapper whose
forward() takes exactly the example's inputs, then the TorchScript exporter (which keeps a
ScriptModule's control flow as ONNX If/Loop instead of tracing one branch).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, ExportCode, LoadCode, Recipe, ScriptingOff, UseExporter

# OD303/OD304/OD4xx/OD501: what the exporter wrote from the scripted IR (a list of ints as a
# sequence, SplitToSequence's split) refused downstream; the eager class, traced, writes it otherwise.
CODES = ("OD201", "OD202", "OD204", "OD205", "OD299", "OD303", "OD304", "OD402", "OD499", "OD501", "OD601", "OD603")

# TorchScript schema types a generated forward() can annotate (torch.jit.script needs them).
_ANNOTATIONS = {"Tensor": "torch.Tensor", "int": "int", "float": "float", "bool": "bool"}


def script_module(ctx: FixContext) -> dict[str, Any] | None:
    """The LOAD facts of a ScriptModule model (None for an eager one)."""
    load = next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})
    found = load.get("script_module")
    return found if isinstance(found, dict) else None


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Routes around exporting the ScriptModule itself, or the helpers scripted while tracing."""
    helpers = _traced_helpers(finding, ctx)
    if helpers is not None:
        return [helpers]
    facts = script_module(ctx)
    if ctx.target_kind != "script":
        return []
    if facts is None:
        # Scripted parts inside an eager model (a ScriptModule submodule, a scripted function):
        # the tracer refuses some ("Tried to trace <__torch__.FPN> but it is not part of the
        # active trace"), the exporter others; with TorchScript off they are Python it traces.
        # (A scripted model itself takes the routes below: with TorchScript off it would be
        # another class than the one diagnosed, and a ScriptModule subclass stays one the
        # exporters refuse.)
        if not ctx.facts_of(Stage.LOAD).get("scripted_parts"):
            return []
        return [_scripting_off(ctx), *([_scripted_whole()] if _NOT_IN_TRACE in ctx.export_error else [])]
    fixes: list[Fix] = []
    eager = facts.get("eager_class")
    gradients = bool(ctx.facts_of(Stage.LOAD).get("forward_needs_gradients"))  # the comparison must keep them on
    built = _eager_class(str(eager), bool(facts.get("script_subclass")), bool(facts.get("hooks")),
                         gradients) if eager else None
    if finding.stage is not Stage.EXPORT:
        # The ScriptModule exported but computes otherwise (the exporter leaves out what only the
        # scripted module runs, e.g. its own forward hooks), or wrote what the checker or the
        # runtime refuses: the eager class, traced.
        return [built] if built else []
    if built:
        fixes.append(built)
        if ctx.exporter == "torchscript":
            # Scripted, the model could take the TorchScript exporter only; eager, it can take the
            # dynamo exporter too, which maps ops the TorchScript symbolics refuse (a complex stft).
            fixes.append(_with_dynamo(fixes[-1]))
    wrapper = _wrapper(facts)
    if wrapper is not None:
        fixes.append(wrapper)
    fixes.append(_converter())
    return fixes


# The tracer's refusal of a scripted submodule it meets while tracing (a torch.jit.load-ed
# network in an nn.Sequential with eager layers, dinohash-perceptual-hash#4).
_NOT_IN_TRACE = "but it is not part of the active trace"

SCRIPT_WHOLE = "scripted = torch.jit.script(model)  # one ScriptModule: its scripted parts are called, not traced\n"


def _scripted_whole() -> Fix:
    """The whole model scripted, for the TorchScript exporter, which exports a ScriptModule: a
    scripted part the tracer cannot enter (loaded with torch.jit.load, so PYTORCH_JIT=0 has no
    Python to give back) is then called from scripted code instead of traced."""
    return Fix(
        kind="scripted_whole",
        title="Script the whole model (torch.jit.script) so its scripted parts are called from scripted code, "
              "not traced; the TorchScript exporter exports a ScriptModule",
        snippet=SCRIPT_WHOLE + "torch.onnx.export(scripted, example_inputs, 'model.onnx', dynamo=False)\n",
        applicability=Applicability.UNSAFE,
        cost=("forward() and its eager submodules must be scriptable (type annotations, no unsupported Python); "
              "the TorchScript exporter is deprecated"),
        # Exported in place of the model, which stays PyTorch's reference (scripting is what is checked).
        recipe=Recipe("scripted_whole", (ExportCode(SCRIPT_WHOLE, program="scripted"), UseExporter("torchscript")),
                      isolated=True),
    )


SCRIPTING_OFF = """\
# TorchScript off in the process that exports, set before torch is imported (in a shell:
# PYTORCH_JIT=0 python export.py): torch.jit.script and @torch.jit.script_method then return the
# Python code they are given, torch.jit.ScriptModule is a plain nn.Module, and the exporter traces
# through every part of the model.
import os
import sys

assert "torch" not in sys.modules, "PYTORCH_JIT is read when torch is imported: set it first"
os.environ["PYTORCH_JIT"] = "0"

import torch

"""


def _scripting_off(ctx: FixContext) -> Fix:
    parts = ctx.facts_of(Stage.LOAD).get("scripted_parts") or 1
    return Fix(
        kind="scripting_off",
        title=f"Export with TorchScript off (PYTORCH_JIT=0): the model's {parts} scripted "
              f"part{'s' if parts != 1 else ''} (torch.jit.script, torch.jit.ScriptModule) stay Python the "
              "exporter traces",
        snippet=SCRIPTING_OFF + "torch.onnx.export(model, example_inputs, 'model.onnx'"
                + (f", dynamo={ctx.exporter == 'dynamo'})\n" if ctx.exporter else ")\n"),
        applicability=Applicability.UNSAFE,
        cost="none at run time; control flow inside the scripted parts is traced for the example (check "
             "other inputs, or declare the sizes dynamic)",
        recipe=Recipe("scripting_off", (ScriptingOff(),), isolated=True),
    )


# The class rebuilt on nn.Module: torch.jit.ScriptModule's metaclass scripts every instance after
# __init__ and keeps each @script_method's Python function in the class's `_methods` stubs.
EAGER_TWIN = """\
import types


def eager_twin(cls):
    \"\"\"`cls` with torch.jit.ScriptModule replaced by nn.Module and each @torch.jit.script_method
    (and __init__) its Python function again.\"\"\"
    if cls is torch.jit.ScriptModule:
        return torch.nn.Module
    if not issubclass(cls, torch.jit.ScriptModule):
        return cls
    body = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__", "_methods")}
    body.update({k: stub.original_method for k, stub in vars(cls).get("_methods", {}).items()})
    body = {k: getattr(v, "original_method", v) for k, v in body.items()}
    if "__init__" in body:
        body["__init__"] = getattr(body["__init__"], "__wrapped__", body["__init__"])
    twin = type(cls.__name__, tuple(eager_twin(b) for b in cls.__bases__), body)
    for key, value in body.items():
        # super() in a method reads the class from a cell: the twin's, not cls's.
        if isinstance(value, types.FunctionType) and "__class__" in value.__code__.co_freevars:
            cells = tuple(types.CellType(twin) if free == "__class__" else cell
                          for free, cell in zip(value.__code__.co_freevars, value.__closure__))
            rebuilt = types.FunctionType(value.__code__, value.__globals__, value.__name__, value.__defaults__, cells)
            rebuilt.__kwdefaults__ = value.__kwdefaults__
            setattr(twin, key, rebuilt)
    return twin


"""


# The hooks torch.jit.script compiled into the model, registered again by name on the eager
# modules: the script's own functions (a ScriptModule keeps no Python callable of them).
HOOKS = """\
# The forward hooks the scripted model runs, by their names in your script:
scripted = dict(model.named_modules())
for path, module in eager.named_modules():
    compiled = scripted[path]._c
    for hook in compiled._get_forward_pre_hooks():
        module.register_forward_pre_hook(globals()[hook.name])
    for hook in compiled._get_forward_hooks():
        module.register_forward_hook(globals()[hook.name])
"""


def _eager_class(name: str, subclass: bool = False, hooks: bool = False, gradients: bool = False) -> Fix:
    build = f"eager_twin({name})()" if subclass else f"{name}()"
    code = (
        (EAGER_TWIN if subclass else "")
        + "# The class you scripted, built eagerly and given the scripted model's weights:\n"
        "# both exporters take an eager module (export it instead of torch.jit.script's result).\n"
        + (f"# {name} derives from torch.jit.ScriptModule: the same class on nn.Module is built.\n"
           if subclass else "")
        + f"eager = {build}\n"
        "eager.load_state_dict(model.state_dict())\n"
        + (HOOKS if hooks else "")
        + "eager.train(model.training)\n"
        "if not model.training:  # the same numbers as the scripted model at the example inputs\n"
        + ("    with torch.enable_grad():  # forward() takes gradients itself\n" if gradients else
           "    with torch.no_grad():\n")
        +
        # Keyword inputs too (a module traced with example_kwarg_inputs, pytorch#100414).
        "        keywords = globals().get('example_kwargs') or {}\n"
        "        torch.testing.assert_close(eager(*example_inputs, **keywords), model(*example_inputs, **keywords))\n"
        "model = eager\n"
    )
    return Fix(
        kind="scripted_eager",
        title=(f"Export {name} rebuilt on nn.Module (it derives from torch.jit.ScriptModule) with the scripted "
               "model's weights" if subclass else
               f"Export the eager {name} (the class you scripted) with the scripted model's weights"
               + (" and its forward hooks (the TorchScript exporter leaves a ScriptModule's own hooks out)"
                  if hooks else "")),
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.SAFE,
        cost=f"none: the same code and weights; keep torch.jit.script for your TorchScript deployment "
             f"and export {build} itself",
        recipe=Recipe("scripted_eager", (LoadCode(code),), isolated=True),
    )


def _with_dynamo(eager: Fix) -> Fix:
    """The eager class exported with the dynamo exporter."""
    assert eager.recipe is not None
    return replace(
        eager,
        title=eager.title + ", with the dynamo exporter (a ScriptModule cannot take it)",
        snippet=eager.snippet.replace("torch.onnx.export(model, example_inputs, 'model.onnx')",
                                      "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)"),
        recipe=Recipe("scripted_eager", (*eager.recipe.steps, UseExporter("dynamo")), isolated=True),
    )


def _wrapper(facts: dict[str, Any]) -> Fix | None:
    """A scripted wrapper calling the model with the example's positional inputs only."""
    arguments = [a for a in facts.get("arguments") or () if isinstance(a, dict)]
    given = int(facts.get("positional_inputs") or 0)
    if facts.get("keyword_inputs") or not given or len(arguments) <= given:
        return None  # nothing left out: the TorchScript exporter's own call is the same
    annotated = []
    for argument in arguments[:given]:
        annotation = _ANNOTATIONS.get(str(argument.get("type")))
        name = str(argument.get("name") or "")
        if annotation is None or not name.isidentifier():
            return None
        annotated.append(f"{name}: {annotation}")
    names = ", ".join(str(a["name"]) for a in arguments[:given])
    left = ", ".join(str(a["name"]) for a in arguments[given:])
    kept = "left at its default" if len(arguments) - given == 1 else "left at their defaults"
    code = (
        "import torch\n\n\n"
        "class ExampleCall(torch.nn.Module):\n"
        f"    \"\"\"Calls the scripted model with the example's inputs only ({left} {kept}).\"\"\"\n\n"
        "    def __init__(self, inner: torch.nn.Module) -> None:\n"
        "        super().__init__()\n"
        "        self.inner = inner\n\n"
        f"    def forward(self, {', '.join(annotated)}):\n"
        f"        return self.inner({names})\n\n\n"
        "model = torch.jit.script(ExampleCall(model))\n"
    )
    return Fix(
        kind="scripted_wrapper",
        title=f"Script a wrapper whose forward() takes only the example's inputs ({left} {kept}) "
              "and export it with the TorchScript exporter",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n",
        applicability=Applicability.SAFE,
        cost=f"the ONNX model has no input for {left}; the TorchScript exporter is deprecated, but it "
             "keeps a ScriptModule's control flow (ONNX If/Loop)",
        recipe=Recipe("scripted_wrapper", (LoadCode(code), UseExporter("torchscript")), isolated=True),
    )


def _converter() -> Fix:
    code = (
        "from torch._export.converter import TS2EPConverter  # torch's TorchScript -> torch.export converter\n\n"
        "program = TS2EPConverter(model, example_inputs).convert()\n"
    )
    return Fix(
        kind="scripted_converter",
        title="Convert the ScriptModule to an ExportedProgram (TS2EPConverter) and export that with the "
              "dynamo exporter",
        snippet=code + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n",
        applicability=Applicability.SAFE,
        cost="TS2EPConverter is a private torch API and converts only some TorchScript (no prim::Loop); "
             "control flow it converts becomes torch.cond (ONNX If)",
        recipe=Recipe("scripted_converter", (UseExporter("dynamo"), ExportCode(code, program="program"))),
    )


def _traced_helpers(finding: Finding, ctx: FixContext) -> Fix | None:
    """A TorchScript export that failed with @torch.jit.script_if_tracing helpers in the script:
    trace them as Python (the exporter met their scripted graph)."""
    helpers = ctx.facts_of(Stage.LOAD).get("script_if_tracing") or ()
    if not helpers or ctx.exporter != "torchscript" or finding.stage is not Stage.EXPORT or ctx.target_kind != "script":
        return None
    names = ", ".join(str(h) for h in helpers[:3])
    return Fix(
        kind="scripted_helpers",
        title=f"Trace {names} as Python instead of scripting it (@torch.jit.script_if_tracing)",
        snippet=(
            "# torch.jit.script_if_tracing scripts the function when the tracer first calls it, and the\n"
            "# exporter then meets its scripted graph. Traced as Python, each call is recorded op by op\n"
            "# (a loop unrolled for the example's sizes): drop the decorator for the export, e.g.\n"
            f"{helpers[0]} = {helpers[0]}.__original_fn  # the undecorated function\n"
            "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n"
        ),
        applicability=Applicability.SAFE,
        cost=("a loop over a data-dependent count is unrolled for the example's count: the check at other "
              "inputs says whether the export holds there"),
        recipe=Recipe("scripted_helpers", (EagerExport(traced_helpers=True), UseExporter("torchscript")),
                      isolated=True),
    )
