"""Outputs torch.export cannot flatten (OD211): the model's own switch, or tensors only.

A transformers decoder returns its key/value cache (`DynamicCache`) unless `use_cache` is off; any
model can be wrapped so that forward() returns only the tensors among its outputs. Both run as a
`load_prelude`: the snippet's own code, applied before the reference outputs are computed, so
parity compares like with like and what is verified is what the user pastes.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, LoadCode, Recipe

CODES = ("OD211", "OD299", "OD210")

# The tracer's warning for a tensor converted to a NumPy array.
_TO_NUMPY = "Converting a tensor to a NumPy array"
# The TorchScript exporter flattening outputs that hold numpy arrays: "Here, received an input of
# unsupported type: numpy.ndarray"; the dynamo exporter names the type as it meets it.
NUMPY_OUTPUT = re.compile(r"unsupported type: numpy\.ndarray|<class 'numpy\.ndarray'>")
# classify's OD299 for an object forward() returns to the TorchScript exporter.
_RETURNED_OBJECT = re.compile(r"^forward\(\) returns an? (\w+) object")

WRAPPER = """import copy
import dataclasses

import torch


class TensorOutputs(torch.nn.Module):
    \"\"\"forward() returns only the tensors among the model's outputs (no cache objects).\"\"\"

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    @staticmethod
    def named(out):
        if isinstance(out, dict):
            return [(str(key), value) for key, value in out.items()]
        if dataclasses.is_dataclass(out):
            return [(field.name, getattr(out, field.name)) for field in dataclasses.fields(out)]
        if isinstance(out, (tuple, list)):
            return [(f"output_{index}", value) for index, value in enumerate(out)]
        if not isinstance(out, torch.Tensor) and hasattr(out, "__dict__"):  # a result object's fields
            return [(name, value) for name, value in vars(out).items() if not name.startswith("_")]
        return [("output", out)]

    @classmethod
    def leaves(cls, out):
        \"\"\"The tensors among the outputs, named after the fields they come from (made unique):
        those at the top where there are some, else those a level or more down.\"\"\"
        top = [(name, value) for name, value in cls.named(out) if isinstance(value, torch.Tensor)]
        found = top or cls._leaves(out, "", set())
        seen = {}
        named = []
        for name, value in found:
            seen[name] = seen.get(name, 0) + 1
            named.append((name if seen[name] == 1 else f"{name}_{seen[name]}", value))
        return named

    @classmethod
    def _leaves(cls, out, prefix, visited):
        # Containers are looked into; an object only as an item of a list or tuple that holds no
        # tensor of its own (a list of per-image result objects): a cache object beside the
        # logits, or in a dict, stays out. Modules and objects met before add nothing.
        if isinstance(out, torch.Tensor):
            return [(prefix or "output", out)]
        if id(out) in visited or isinstance(out, (torch.nn.Module, type, str, bytes, int, float, bool)) or out is None:
            return []
        visited = visited | {id(out)}
        items = cls.named(out)
        sequence = isinstance(out, (tuple, list))
        bare = sequence and not any(isinstance(value, torch.Tensor) for _, value in items)
        found = []
        for name, value in items:
            path = f"{prefix}_{name}" if prefix else name
            container = isinstance(value, (dict, tuple, list)) or dataclasses.is_dataclass(value)
            if isinstance(value, torch.Tensor) or container or (bare and hasattr(value, "__dict__")):
                found += cls._leaves(value, path, visited)
        return found

    def output_names(self, *args, **kwargs):
        \"\"\"The fields (or keys) the tensors come from, to name the ONNX outputs after.\"\"\"
        # A model in training mode would update its batch-norm statistics: ask a copy.
        model = copy.deepcopy(self.model) if self.model.training else self.model
        with torch.no_grad():
            return [name for name, _ in self.leaves(model(*args, **kwargs))]

    def forward(self, *args, **kwargs):
        return tuple(value for _, value in self.leaves(self.model(*args, **kwargs)))


model = TensorOutputs(model).train(model.training)
output_names = model.output_names(*example_inputs)  # e.g. ["logits"], not the last op's name
"""
USE_CACHE_OFF = """# forward() then returns no cache object. Every submodule's config: an encoder-decoder's
# decoder (T5) keeps a config of its own.
for module in model.modules():
    if hasattr(getattr(module, "config", None), "use_cache"):
        module.config.use_cache = False
"""
EXPORT = "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n"


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """`use_cache=False` for models with that switch, then a wrapper that returns tensors only;
    for numpy arrays among the outputs (OD299), the arrays kept tensors."""
    if ctx.target_kind != "script":
        return []
    if finding.code == "OD210":
        # forward() converts its results to NumPy and the caller wraps them back (mmaction2's
        # test forward returns `output.data.cpu().numpy()`): the graph is the example's constant.
        if any(_TO_NUMPY in e for e in finding.evidence):
            return _numpy_outputs(finding, ctx, converted=True)
        return []
    if finding.code == "OD299":
        load = ctx.facts_of(Stage.LOAD)
        # Text beside tensors (labels made from logits); text alone (a bitstream) has nothing to keep.
        text = load.get("text_output") if load.get("outputs") else None
        returned = _RETURNED_OBJECT.search(finding.message)
        if returned:  # an object among the outputs (a decoder's state, a Batch): its tensors kept
            return [_tensors_only(
                f"Wrap the model so forward() returns only its tensors (the {returned.group(1)} object dropped, "
                "its tensor fields kept where the outputs hold no tensor beside it)",
                f"the {returned.group(1)} object is not an output of the ONNX model: the caller rebuilds what it "
                "needs from the tensors; a list of result objects gives one set of outputs per item of the "
                "example's list, so as many items as the example has")]
        return _numpy_outputs(finding, ctx) + ([_tensors_only(
            f"Wrap the model so forward() returns only its tensors (the text in {text} is made outside the model)",
            "the text outputs are dropped from the ONNX model: the caller makes them from the tensor outputs "
            "(class indices to labels, codes to bytes), as forward() did")] if text else [])
    load = next((o for o in ctx.outcomes if o.stage is Stage.LOAD), None)
    has_switch = bool(load and load.facts.get("config_use_cache") is not None)
    fixes = []
    if has_switch:
        fixes.append(Fix(
            kind="use_cache_off",
            title="Turn the model's cache off: model.config.use_cache = False",
            snippet=USE_CACHE_OFF + EXPORT,
            applicability=Applicability.SAFE,
            cost="the ONNX model recomputes past keys and values each call: for generation, export the "
                 "cache as tensors (the flat-cache fix, verified with --all-fixes)",
            recipe=Recipe("use_cache_off", (LoadCode(USE_CACHE_OFF),), isolated=True),
        ))
    fixes.append(_tensors_only(
        "Wrap the model so forward() returns only its tensors",
        "outputs that are not tensors (a cache object, a Python number) are dropped from the ONNX model"))
    return fixes


def _tensors_only(title: str, cost: str) -> Fix:
    """The model wrapped so forward() returns only its tensors (WRAPPER), the outputs named after
    their fields; what is dropped is said in `cost`."""
    return Fix(
        kind="tensor_outputs",
        title=title,
        snippet=WRAPPER + EXPORT.replace("dynamo=True", "dynamo=True, output_names=output_names"),
        applicability=Applicability.UNSAFE,
        cost=cost,
        recipe=Recipe("tensor_outputs", (LoadCode(WRAPPER),), isolated=True),
    )


def _numpy_outputs(finding: Finding, ctx: FixContext, *, converted: bool = False) -> list[Fix]:
    """forward() hands its results over as numpy arrays (`.cpu().numpy()` at its end): exported
    with `Tensor.numpy()` giving the tensor, the arithmetic after it stays in the graph.
    `converted`: the tracer warned of the conversion (the arrays were made tensors again)."""
    text = f"{finding.message} {ctx.export_error}"
    if not converted and not NUMPY_OUTPUT.search(text):
        return []
    return [Fix(
        kind="numpy_outputs",
        title="Return tensors where forward() converts its results with .numpy(); convert the ONNX "
              "outputs instead",
        snippet=(
            "# before:  flow = flow.permute(0, 2, 3, 1).cpu().numpy() * self.flow_div\n"
            "flow = flow.permute(0, 2, 3, 1) * self.flow_div   # the same arithmetic, on the tensor\n"
            "# ONNX Runtime returns numpy arrays anyway: the caller gets what it got before.\n"
        ),
        applicability=Applicability.SAFE,
        cost=("an edit to forward(); checked by exporting it with .numpy() returning the tensor, at the "
              "example and other inputs (numpy functions applied afterwards would be frozen there)"),
        recipe=Recipe("numpy_outputs", (EagerExport(tensor_outputs=True),), isolated=True),
    )]
