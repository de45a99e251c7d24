"""What the fix families know about a finding: the op, its schema, the exporter, the opset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from onnxdoctor.model import Finding, Stage, StageOutcome
from onnxdoctor.opsig import attribute_suffix
from onnxdoctor.recipe import Reference, RewriteOnnx, Transform

# onnxruntime-extensions' PyCustomOpDef type of each dtype (the Python kernels the fixes write).
EXTENSIONS_TYPES = {"float32": "dt_float", "float64": "dt_double", "float16": "dt_float16",
                    "bfloat16": "dt_bfloat16", "int64": "dt_int64", "int32": "dt_int32", "int16": "dt_int16",
                    "int8": "dt_int8", "uint8": "dt_uint8", "bool": "dt_bool"}


@dataclass(frozen=True)
class OpArgument:
    """One argument of a torch op's schema, as the export mappings need it."""

    name: str
    type: str
    default: Any = None
    has_default: bool = False

    @property
    def is_tensor(self) -> bool:
        """Whether the argument is a tensor (an ONNX input) rather than an attribute."""
        return self.type in ("Tensor", "Tensor?")

    @property
    def supported(self) -> bool:
        """Whether the generated mappings can carry this argument (tensor lists cannot)."""
        # Lists and optional tensors have no attribute type in onnxruntime-extensions' kernels.
        return self.type in ("Tensor", "float", "int", "bool", "str", "Scalar", "SymInt",
                             "float?", "int?", "bool?", "str?", "Scalar?")

    @property
    def onnx_suffix(self) -> str:
        """The `g.op` attribute suffix for this type (`_f`, `_i`, `_s`, `_t`)."""
        return attribute_suffix(self.type)

    @property
    def parse_args_code(self) -> str:
        """symbolic_helper.parse_args descriptor: v (value), f, i, b, s, is, fs."""
        if self.is_tensor:
            return "v"
        base = self.type.rstrip("?")
        return {"float": "f", "Scalar": "f", "int": "i", "SymInt": "i", "bool": "b", "str": "s",
                "int[]": "is", "SymInt[]": "is", "float[]": "fs"}.get(base, "v")

    @property
    def python_annotation(self) -> str:
        """The Python annotation for this argument in a generated function."""
        base = self.type.rstrip("?")
        return {"float": "float", "Scalar": "float", "int": "int", "SymInt": "int", "bool": "bool",
                "str": "str", "int[]": "Sequence[int]", "float[]": "Sequence[float]"}.get(base, "float")

    @property
    def extensions_type(self) -> str | None:
        """onnxruntime-extensions attribute type; None where it has none (lists)."""
        base = self.type.rstrip("?")
        return {"float": "dt_float", "Scalar": "dt_float", "int": "dt_int64", "SymInt": "dt_int64",
                "bool": "dt_int64", "str": "dt_string"}.get(base)


@dataclass(frozen=True)
class FixContext:
    """Facts gathered by the worker that the families use to tailor snippets."""

    target_kind: str
    target_name: str
    exporter: str | None
    requested_opset: int | None
    op: str | None
    op_facts: dict[str, Any] = field(default_factory=dict)
    call_args: list[Any] = field(default_factory=list)
    training: bool = False
    mode_sensitive: tuple[str, ...] = ()
    outcomes: tuple[StageOutcome, ...] = ()
    export_facts: dict[str, Any] = field(default_factory=dict)
    factory: str = "model"  # the function that built the model, or "model" for module-level names
    factory_form: str = "module"  # how it gave them (worker/loader.py, LoadedModel.form)
    target_path: str = ""  # the model script or ONNX file, as given

    @classmethod
    def build(cls, finding: Finding, context: dict[str, Any]) -> FixContext:
        """The context of one finding, from the run's stage outcomes and its target."""
        outcomes = tuple(context.get("outcomes", ()))
        facts = {o.stage: o.facts for o in outcomes}
        export = facts.get(Stage.EXPORT, {})
        load = facts.get(Stage.LOAD, {})
        target = context.get("target")
        return cls(
            target_kind=getattr(target, "kind", "script"),
            target_name=getattr(target, "display", "model.py"),
            exporter=context.get("exporter") or export.get("exporter"),
            requested_opset=export.get("requested_opset"),
            op=finding.op or export.get("op"),
            op_facts=export.get("op_facts") or {},
            call_args=list(export.get("call_args") or []),
            training=bool(load.get("training")),
            mode_sensitive=tuple(load.get("mode_sensitive_modules") or ()),
            outcomes=outcomes,
            export_facts=export,
            factory=str(load.get("factory") or "model"),
            factory_form=str(load.get("factory_form") or "module"),
            target_path=str(getattr(target, "path", "") or ""),
        )

    @property
    def build_lines(self) -> str:
        """Code that builds `model` and `example_inputs` the way the user's script does (its own
        factory, or its module-level names), for snippets that change the model before export."""
        factory = self.factory
        match self.factory_form:
            case "pair":
                return f"model, example_inputs = {factory}()\n"
            case "triple":
                return f"model, example_inputs, example_kwargs = {factory}()\n"
            case "get_inputs":
                return f"model, example_inputs = {factory}(), get_inputs()\n"
            case "example_inputs":
                return f"model = {factory}()\n"
        return ""  # module-level `model` and `example_inputs`: already there

    @property
    def schema_arguments(self) -> list[OpArgument]:
        """The op's arguments from its torch schema, in order."""
        schema = self.op_facts.get("schema") or {}
        return [
            OpArgument(a["name"], a["type"], a.get("default"), "default" in a)
            for a in schema.get("arguments", [])
        ]

    @property
    def observed_dtypes(self) -> tuple[list[str], list[str]]:
        """The dtypes (torch names: float32, int64) of the op's tensor arguments and of its results,
        from its first call the worker observed; two empty lists when it saw none."""
        calls = [c for c in self.export_facts.get("op_calls") or () if isinstance(c, dict)]
        if not calls:
            return [], []
        args = [a["dtype"] for a in calls[0].get("args") or () if isinstance(a, dict) and "dtype" in a]
        results = [r["dtype"] for r in calls[0].get("results") or () if isinstance(r, dict) and "dtype" in r]
        return args, results

    @property
    def n_outputs(self) -> int:
        """How many tensors the op returns (at least one)."""
        schema = self.op_facts.get("schema") or {}
        return max(1, len(schema.get("returns", ["Tensor"])))

    @property
    def namespace(self) -> str:
        """The op's namespace (`mynamespace` for `mynamespace::myselu`)."""
        return (self.op or "custom::op").split("::", 1)[0]

    @property
    def op_name(self) -> str:
        """The op's name without its namespace."""
        return (self.op or "custom::op").split("::", 1)[-1]

    @property
    def onnx_op_type(self) -> str:
        """The custom-domain node's op type: the op's name in capitals, like `MYSELU`."""
        return self.op_name.upper()

    def facts_of(self, stage: Stage) -> dict[str, Any]:
        """What one stage recorded ({} when it did not run)."""
        return next((o.facts for o in self.outcomes if o.stage is stage), {})

    def load_error_text(self, finding: Finding) -> str:
        """The whole text of what forward() raised at LOAD (its causes too), else the finding's
        message: what the fixes for OD108 read the failure from."""
        error = next((o.error for o in self.outcomes if o.stage is Stage.LOAD and o.error is not None), None)
        return error.all_text() if error is not None else finding.message

    def traced_sites(self, fact: str) -> tuple[list[str], str]:
        """The user's lines a TorchScript export recorded under `fact` (`data_sites`,
        `written_constants`) and how a title names them; none where the export was another."""
        if self.target_kind != "script" or self.export_facts.get("exporter") != "torchscript":
            return [], ""
        sites = [str(s) for s in self.export_facts.get(fact) or ()]
        return sites, ", ".join(sites[:3]) + (f" and {len(sites) - 3} more" if len(sites) > 3 else "")

    @property
    def export_error(self) -> str:
        """Every message of the failed export's error, chained ones too ("" when it passed)."""
        export = next((o for o in self.outcomes if o.stage is Stage.EXPORT and o.error is not None), None)
        return export.error.all_text() if export is not None and export.error is not None else ""

    @property
    def parity_facts(self) -> dict[str, Any]:
        """What the PARITY stage recorded ({} when it did not run)."""
        return self.facts_of(Stage.PARITY)

    @property
    def diverging(self) -> dict[str, Any]:
        """Where a mismatch's search found the first differing value ({} when it found none)."""
        found = self.parity_facts.get("diverging")
        return found if isinstance(found, dict) else {}

    def file_rewrite(self, transform: Transform) -> RewriteOnnx:
        """A recipe step rewriting the exported file; for a .onnx target, the original file is
        run beside it as the reference (there is no PyTorch to compare with)."""
        return RewriteOnnx(transform, Reference(required=True) if self.target_kind == "onnx" else None)

    def rewrite_snippet(self, snippet: str) -> str:
        """A file-rewrite snippet with the user's file name in place of 'model.onnx' for a .onnx target."""
        return snippet.replace("'model.onnx'", repr(self.target_name), 1) if self.target_kind == "onnx" else snippet

    def other_exporter(self) -> str:
        """The exporter the run did not use."""
        return "torchscript" if self.exporter == "dynamo" else "dynamo"
