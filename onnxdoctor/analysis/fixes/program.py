"""`--write-fix`'s fix.py: a program that applies a verified fix's recipe, step by step.

The program runs as written in a fresh process: it builds the model through the user's script
(the model-script protocol), runs each step of the recipe the way the worker ran it when it
verified the fix (code with the script's globals, export settings, file rewrites, runtime
kernels), writes the model, and checks it in ONNX Runtime against PyTorch. The fix's snippet,
for reading, is a comment under its docstring.
"""

from __future__ import annotations

from onnxdoctor import recipe as steps  # the step types, matched one by one below
from onnxdoctor.model import Fix
from onnxdoctor.recipe import (
    EagerExport,
    QuantizeOnnx,
    Recipe,
    RuntimeKernels,
)
from onnxdoctor.safetext import comment_safe, printable


def fix_program(fix: Fix, target: str, factory: str | None, kind: str) -> str:
    """The fix.py text for a fix with a recipe, for a script (`kind` "script") or an ONNX file."""
    recipe = fix.recipe or Recipe(fix.kind)
    header = _header(fix, target)
    if kind == "onnx":
        return header + _file_program(recipe, target)
    return header + _script_program(recipe, target, factory)


def _header(fix: Fix, target: str) -> str:
    verified = fix.check.detail if fix.check else "not verified"
    # Names from the user's files (a path holding `"""`, `\N` or a newline, a title naming the
    # script's module) reach the docstring only comment-safe: no quote or escape is live there.
    # The snippet goes in comments: it may hold triple quotes of its own (a docstring).
    snippet = "\n".join(f"#     {line}" if line else "#" for line in printable(fix.snippet.rstrip()).split("\n"))
    quotes = '"' * 3
    return (
        f"{quotes}Fix for {_doc(target)}: {_doc(fix.title)}.\n\n"
        f"onnxdoctor verified it: {_doc(verified)}.\n\n"
        "Run it from anywhere; it writes the fixed model (default: model.onnx beside this file) and\n"
        "checks it in ONNX Runtime:\n\n"
        "    python fix.py [OUTPUT.onnx]\n\n"
        "The change itself, to carry into your own code, is in the comment below.\n"
        f"{quotes}\n\n"
        f"{snippet}\n\n"
        "from __future__ import annotations\n\n"
        "import sys\n"
        "from pathlib import Path\n\n"
        "OUTPUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name('model.onnx')\n\n"
    )


def _doc(text: str) -> str:
    """One line of text from the user's files, safe inside the docstring."""
    return comment_safe(printable(text, one_line=True))


def _literal(code: str) -> str:
    """Code as a Python string literal that reads like code (triple-quoted when it can be).

    Anything a triple-quoted literal would read differently (a backslash, a quote at its end,
    `'''`, a control character or lone surrogate) gets `repr()`.
    """
    if "'''" not in code and "\\" not in code and not code.endswith("'") and printable(code) == code:
        return "'''\\\n" + code + "'''"
    return repr(code)


def _script_program(recipe: Recipe, target: str, factory: str | None) -> str:
    lines = [
        "import torch\n",
        "from onnxdoctor.recipe import *  # noqa: F403 (the recipe's step types)",
        "from onnxdoctor.worker import fixkit\n",
        *(["from onnxdoctor.worker.scripted import turn_scripting_off\n",
           "turn_scripting_off()  # TorchScript off before your script is imported, as PYTORCH_JIT=0 does\n"]
          if recipe.first(steps.ScriptingOff) else []),
        f"loaded = fixkit.load({target!r}, {factory!r}"
        + (", arrays_as_tensors=True)" if recipe.first(steps.ArraysAsTensors) else ")"),
    ]
    for step in recipe.steps:
        match step:
            case steps.EvalMode():
                lines.append("loaded.model.eval()")
            case steps.LoadCode(code=code):
                lines.append(f"fixkit.apply_load_code({_literal(code)}, loaded, 'load')")
    lines.append("reference = fixkit.reference_outputs(loaded)")
    exporter = recipe.first(steps.UseExporter)
    opset = recipe.first(steps.UseOpset)
    dynamo = (f"{exporter.exporter == 'dynamo'}" if exporter
              else "bool(loaded.settings.get('dynamo', True))")
    exported = "loaded.model"
    options = [
        "kwargs=loaded.kwargs or None",
        f"dynamo={dynamo}",
        f"opset_version={opset.opset}" if opset else "opset_version=loaded.settings.get('opset_version')",
        "input_names=loaded.settings.get('input_names')",
        # Named after the export where a rewrite names them (recipe.NameOutputs), as the check did.
        "output_names=None" if any(isinstance(r.transform, steps.NameOutputs) for r in recipe.all(steps.RewriteOnnx))
        else "output_names=loaded.settings.get('output_names')",
    ]
    built: set[str] = set()
    for step in recipe.steps:
        match step:
            case steps.ExportCode(code=code, program=program, translation_table=table, nests=nests):
                patched = recipe.first(steps.EagerExport)
                # A wrapper of what an earlier step built under the same name (call rewrites nest):
                # kept in a variable of its own, since a step between them rebinds `names`.
                kept = f"built_{program}"
                given = f", None, {{{program!r}: {kept}}}" if nests and program in built else ""
                if patched:
                    # A program the code captures is captured with the same patches as the export,
                    # as the worker checked it.
                    lines.append(f"with fixkit.eager_export(loaded, {patched!r}):")
                    lines.append(f"    names = fixkit.run_code({_literal(code)}, loaded, 'export'{given})")
                else:
                    lines.append(f"names = fixkit.run_code({_literal(code)}, loaded, 'export'{given})")
                if program:
                    lines.append(f"{kept} = names[{program!r}]")
                    exported = kept
                    built.add(program)
                if table:
                    options.append(f"custom_translation_table=names[{table!r}]")
            case steps.CustomOpsets(domains=domains):
                options.append(f"custom_opsets={dict(domains)!r}")
            case steps.OperatorExportType(name=name):
                options.append(f"operator_export_type=torch.onnx.OperatorExportTypes.{name}")
            case steps.Unoptimized():
                options.append("optimize=False")
    shapes = recipe.first(steps.DynamicShapes)
    declare = recipe.first(steps.DeclareDynamic)
    if declare is not None:
        # The dims the fix declares, on top of the script's: dynamic_shapes of named Dims, or
        # dynamic_axes with input_names for TorchScript (fixkit builds both as the check did).
        options = [o for o in options if not o.startswith("input_names=")]
        lines.append(f"declared = fixkit.declared_dynamic(loaded, {declare!r}, {dynamo}, loaded.settings)")
        options.append("**declared")
    elif dynamo != "False":
        options.append(f"dynamic_shapes=fixkit.dynamic_shapes(loaded.settings, {shapes!r})"
                       if shapes else "dynamic_shapes=loaded.settings.get('dynamic_shapes')")
    if declare is None and dynamo == "False":
        options.append("dynamic_axes=loaded.settings.get('dynamic_axes')")  # the script's, as exported
    joined = ",\n    ".join(options)
    # Declared dims of size 1 in the example: the export traces it doubled (fixkit.widened_for_export).
    args = ("fixkit.widened_for_export(loaded, declared.get('dynamic_shapes'))"
            if declare is not None and dynamo != "False" else "loaded.args")
    if recipe.first(steps.TrailingDict):
        args = f"(*{args}, {{}})"  # a dict at the end of args would be read as keyword arguments
    per_sample = recipe.first(steps.PerSample)
    if per_sample is not None:
        # One sample exported, its batch dim undeclared (fixkit.one_sample), as the check did.
        lines.append(f"export_options = dict(\n    {joined},\n)")
        lines.append(f"export_args, export_options = fixkit.one_sample(loaded, {per_sample!r}, tuple({args}), "
                     "export_options)")
        args, joined = "export_args", "**export_options"
    eager = recipe.first(EagerExport)
    if eager:
        # The step's patches (Functions' symbolics set aside, is_in_onnx_export() false, ...): for
        # the export only.
        lines.append(f"with fixkit.eager_export(loaded, {eager!r}):")
        lines.append(f"    torch.onnx.export(\n        {exported}, {args}, str(OUTPUT),\n        "
                     + joined.replace("\n    ", "\n        ") + ",\n    )")
    else:
        lines.append(f"torch.onnx.export(\n    {exported}, {args}, str(OUTPUT),\n    {joined},\n)")
    quantize = recipe.first(QuantizeOnnx)
    tolerance = ""
    if quantize is not None:
        lines.append(f"fixkit.quantize_file(OUTPUT, {quantize!r}).replace(OUTPUT)  # ONNX Runtime's quantization")
        tolerance = f", atol=fixkit.quantization_atol(reference, {quantize.tolerance!r}), rtol=0.0"
    lines += _after_export(recipe, "reference, loaded", tolerance)
    decode = recipe.first(steps.DecodeCheck)
    if decode is not None:  # generation with the exported cache, as the worker checked it
        lines.append(f"fixkit.decode_check(OUTPUT, loaded, {decode!r})")
    carried = recipe.first(steps.StateCheck)
    if carried is not None:  # calls with the state fed back, as the worker checked them
        lines.append(f"fixkit.state_check(OUTPUT, loaded, {carried!r})")
    return "\n".join(lines) + "\n"


def _file_program(recipe: Recipe, target: str) -> str:
    lines = [
        "import shutil\n",
        "from onnxdoctor.recipe import *  # noqa: F403 (the recipe's step types)",
        "from onnxdoctor.worker import fixkit\n",
        f"shutil.copyfile({target!r}, OUTPUT)",
    ]
    return "\n".join([*lines, *_after_export(recipe, "None, None")]) + "\n"


def _after_export(recipe: Recipe, compared_with: str, tolerance: str = "") -> list[str]:
    """The file rewrites, the runtime kernels, and the check in ONNX Runtime, as program lines."""
    lines = []
    rewrites = recipe.all(steps.RewriteOnnx)
    if rewrites:
        lines.append(f"fixkit.rewrite_file(OUTPUT, {rewrites!r})")
    libraries: list[str] = []
    for kernels in recipe.all(steps.RuntimeKernels):
        libraries += kernels.libraries
        if kernels.python:
            # With the script's globals where there is a script: the kernel calls its code.
            scope = "loaded" if compared_with.endswith("loaded") else "None"
            lines.append(f"fixkit.run_code({_literal(kernels.python)}, {scope}, 'kernel')")
    extensions = any(k.extensions for k in recipe.all(RuntimeKernels))
    config = recipe.first(steps.SessionConfig)
    # The session configuration the model must be run with (a deployer sets the same entries).
    configured = f", config={config.entries!r}" if config else ""
    # A loop run to its last step: PyTorch's steps are what is compared (recipe.PrefixParity).
    configured += ", prefix=True" if recipe.first(steps.PrefixParity) else ""
    lines.append(f"fixkit.check(OUTPUT, {compared_with}, libraries={tuple(libraries)!r}, extensions={extensions}"
                 f"{tolerance}{configured})")
    return lines
