"""The frozen table of finding codes; long explanations live in explanations/ODnnn.md."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from onnxdoctor.model import PIPELINE_STAGES, Severity, Stage


@dataclass(frozen=True)
class Code:
    """A stable finding code. Never renumber or reuse one."""

    code: str
    slug: str
    stage: Stage
    severity: Severity
    summary: str
    # Why a code has no fixture, when it cannot have one (fixtures/expected.py lists the reasons).
    no_fixture_reason: str = ""


E, W = Severity.ERROR, Severity.WARNING
L, X, C, R, U, P = PIPELINE_STAGES  # load, export, check, ort_load, ort_run, parity
G, T, S = Stage.TARGET, Stage.TOOL, Stage.SHAPES

CODES: tuple[Code, ...] = (
    # 0xx: environment (reported against the tool stage)
    Code("OD001", "missing-dependency", T, E, "A library the stage needs is not installed"),
    Code("OD002", "graphviz-missing", T, E, "Neither Graphviz nor graphviz-pure is on PATH; only the .dot file was written"),
    Code("OD003", "runtime-older-than-exporter", T, W, "The installed ONNX Runtime loads older opsets/IR versions than the exporter writes"),
    Code("OD099", "environment-other", T, E, "Another environment problem"),
    # 1xx: load
    Code("OD101", "target-not-found", L, E, "The model script or ONNX file does not exist"),
    Code("OD102", "target-unreadable", L, E, "The target is not a readable Python script (directory, binary, not UTF-8, empty)"),
    Code("OD103", "script-syntax-error", L, E, "The model script has a syntax error"),
    Code("OD104", "script-raised", L, E, "The model script raised while being imported"),
    Code("OD105", "model-not-found", L, E, "The script defines no factory or module-level model"),
    Code("OD106", "bad-factory-return", L, E, "The factory returned something other than (model, inputs[, kwargs])"),
    Code("OD107", "inputs-not-tensors", L, E, "The example inputs are not tensors"),
    Code("OD108", "forward-failed", L, E, "The model's forward raised with the example inputs"),
    Code("OD109", "script-exited", L, E, "The model script called exit() while loading"),
    Code("OD110", "onnx-file-invalid", L, E, "The ONNX file is empty, truncated, not a ModelProto, or not a regular file"),
    Code("OD111", "external-data-escapes", L, E, "External data points outside the model's folder; refused"),
    Code("OD112", "external-data-missing", L, E, "External data the model references is missing or out of range"),
    Code("OD113", "model-not-a-module", L, E, "The model is not a torch.nn.Module or callable"),
    Code("OD114", "model-not-reproducible", L, E, "The script built a different model when imported again (fix checks re-import it)"),
    Code("OD199", "load-other", L, E, "Loading failed for another reason"),
    # 2xx: export
    Code("OD201", "aten-op-unsupported-at-opset", X, E, "An aten operator is not supported at the requested opset"),
    Code("OD202", "aten-op-unsupported", X, E, "An aten operator has no ONNX export at any opset"),
    Code("OD203", "unregistered-custom-op", X, E, "A custom operator has no ONNX export mapping"),
    Code("OD204", "torch-export-capture-failed", X, E, "torch.export could not capture the model (data-dependent control flow, guards)"),
    Code("OD205", "bad-symbolic-node", X, E, "A user symbolic function emitted an invalid node (attribute suffix, arity)"),
    Code("OD206", "training-mode-export", X, W, "The model was exported in training mode (dropout, batch norm)"),
    Code("OD207", "opset-substituted", X, W, "The exporter wrote a different opset than requested"),
    Code("OD208", "dynamic-shapes-invalid", X, E, "dynamic_shapes do not match what torch.export found"),
    Code("OD209", "opset-out-of-range", X, W, "The requested opset is outside what the exporter supports"),
    Code("OD210", "traced-value-frozen", X, W, "The TorchScript tracer froze a data-dependent branch or value"),
    Code("OD211", "output-not-flattenable", X, E, "The model returns an object torch.export cannot flatten (a cache, a custom class)"),
    Code("OD212", "custom-op-without-fake", X, E, "A custom operator has no fake (meta) kernel, so torch.export cannot trace it"),
    Code("OD299", "export-other", X, E, "Export failed for another reason"),
    # 3xx: check
    Code("OD301", "op-not-in-opset", C, E, "An ONNX op does not exist at the model's opset (No Op registered)"),
    Code("OD302", "missing-opset-import", C, E, "A node uses a domain the model does not import"),
    Code("OD303", "bad-node-spec", C, E, "A node violates its schema (inputs, attributes, types)"),
    Code("OD304", "shape-inference-error", C, E, "ONNX shape inference failed"),
    Code("OD305", "aten-node-in-graph", C, W, "The graph holds ATen fallback nodes few runtimes execute"),
    Code("OD306", "graph-structure-invalid", C, E, "The graph is malformed (cycles, duplicate or undefined names)"),
    Code("OD399", "check-other", C, E, "The ONNX checker failed for another reason"),
    # 4xx: runtime load
    Code("OD401", "unregistered-runtime-op", R, E, "ONNX Runtime has no kernel for a custom-domain op"),
    Code("OD402", "no-kernel-for-type", R, E, "ONNX Runtime has no kernel for this op with these types/opset"),
    Code("OD403", "ir-version-unsupported", R, E, "The model's IR version is newer than ONNX Runtime supports"),
    Code("OD404", "opset-unsupported-by-runtime", R, E, "The model's opset is newer than ONNX Runtime supports"),
    Code("OD405", "custom-op-library-failed", R, E, "A custom-op library could not be loaded"),
    Code("OD406", "checker-passed-runtime-refused", R, W, "The ONNX checker passed a model ONNX Runtime refuses"),
    Code("OD499", "runtime-load-other", R, E, "ONNX Runtime could not load the model for another reason"),
    # 5xx: runtime run
    Code("OD501", "runtime-error", U, E, "ONNX Runtime failed while running the example inputs"),
    Code("OD502", "input-mismatch", U, E, "The example inputs do not match the model's inputs"),
    Code("OD503", "generated-inputs-too-large", U, E, "Inputs generated from the model's declared shapes would exceed the memory cap"),
    Code("OD599", "runtime-run-other", U, E, "Running failed for another reason"),
    # 6xx: parity
    Code("OD601", "output-mismatch", P, E, "Outputs differ from PyTorch beyond tolerance"),
    Code("OD602", "output-count-mismatch", P, E, "ONNX Runtime returned a different number of outputs than PyTorch"),
    Code("OD603", "output-shape-mismatch", P, E, "An output's shape differs from PyTorch's"),
    Code("OD604", "output-dtype-mismatch", P, E, "An output's dtype differs from PyTorch's"),
    Code("OD699", "parity-other", P, E, "Comparing outputs failed for another reason"),
    # 7xx: deployment targets (--target; docs/targets.md)
    Code("OD701", "target-op-unconverted", G, E, "The target runtime cannot convert or run an op of the model"),
    Code("OD702", "target-load-failed", G, E, "The target runtime refused to load or compile the model"),
    Code("OD703", "target-run-failed", G, E, "The target runtime failed while running the example inputs"),
    Code("OD704", "target-output-mismatch", G, E, "The target runtime's outputs differ from PyTorch beyond tolerance"),
    Code("OD705", "target-op-not-in-table", G, E, "The target's published operator table does not support an op (static verdict)"),
    Code("OD706", "target-op-restricted", G, W, "A node violates a restriction of the target's operator table (dtype, attribute, constant input, rank)"),
    Code("OD707", "target-runtime-missing", G, W, "The target's runtime is not installed here; the target was not checked", no_fixture_reason="depends on what is installed: the test environment has OpenVINO, and uninstalling it inside a test would change the environment of every other test"),
    Code("OD799", "target-other", G, E, "A deployment target failed for another reason", no_fixture_reason="a catch-all for target failures no other code describes; none is known to produce it"),
    # 8xx: other input sizes (the SHAPES stage, after parity)
    Code("OD801", "fixed-size-export", S, W, "Nothing was declared dynamic, and the export runs only at the example's sizes where PyTorch runs others"),
    Code("OD802", "frozen-size", S, E, "A dimension declared dynamic is frozen to the example's size inside the graph"),
    Code("OD803", "size-divergence", S, E, "At another input size the exported model runs, and its numbers differ from PyTorch's"),
    Code("OD804", "dynamo-specialised", S, E, "The dynamo exporter specialised a dimension declared dynamic to one value (a guard fixed it)"),
    Code("OD899", "shapes-other", S, W, "Checking other input sizes failed for another reason", no_fixture_reason="a catch-all for a size check that could not complete; none is known to produce it"),
    # 9xx: the tool itself
    Code("OD901", "worker-crashed", T, E, "The worker process died from a signal"),
    Code("OD902", "worker-timed-out", T, E, "The worker exceeded the time limit and was killed"),
    Code("OD903", "worker-exited", T, E, "The worker exited without reporting a result"),
    Code("OD904", "output-flood", T, W, "The model script printed more output than is kept"),
    Code("OD905", "worker-out-of-memory", T, E, "The worker ran out of memory (its cap, --max-memory-mb, or the machine's)"),
    Code("OD999", "internal-error", T, E, "onnxdoctor itself failed (a bug: please report it)"),
)

_BY_CODE: dict[str, Code] = {c.code: c for c in CODES}


def get_code(code: str) -> Code:
    """Return the code's table entry.

    Raises:
        KeyError: the code does not exist.
    """
    return _BY_CODE[code.upper()]


def find_code(text: str) -> Code | None:
    """The code named by `text`: a code such as OD203 (any case, or just 203) or its slug."""
    wanted = text.strip()
    if len(wanted) == 3 and wanted.isascii() and wanted.isdigit():
        wanted = "OD" + wanted
    return _BY_CODE.get(wanted.upper()) or next((c for c in CODES if c.slug == wanted.lower()), None)


def group(entry: Code) -> str:
    """What a code's hundreds digit names (README, Codes): its stage, but `environment` for OD0xx,
    whose findings report against the tool stage."""
    return "environment" if entry.code.startswith("OD0") else entry.stage.value


def catch_all(stage: Stage) -> str:
    """The `xx99` code of a stage."""
    return {
        Stage.LOAD: "OD199",
        Stage.EXPORT: "OD299",
        Stage.CHECK: "OD399",
        Stage.ORT_LOAD: "OD499",
        Stage.ORT_RUN: "OD599",
        Stage.PARITY: "OD699",
        Stage.TARGET: "OD799",
        Stage.SHAPES: "OD899",
        Stage.TOOL: "OD999",
    }[stage]


def explanation(code: str) -> str:
    """The long Markdown explanation of a code (What it means / Why / How to fix / Example)."""
    entry = get_code(code)
    return resources.files("onnxdoctor").joinpath(f"explanations/{entry.code}.md").read_text("utf-8")


def slug(code: str) -> str:
    """The stable slug of a code (`OD203` -> `unregistered-custom-op`)."""
    return get_code(code).slug

