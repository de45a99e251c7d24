"""`onnxdoctor env`: installed versions, the opsets and IR versions each piece supports, mismatches.

Nothing here imports torch, onnx or onnxruntime into the calling process (docs/ARCHITECTURE.md). Facts that
need those libraries come from a child process (`_probe_main`), and torch's exporter limits are
read from torch's own source files without importing torch, which costs seconds.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from onnxdoctor.envprobe import PROBE_TIMEOUT_S, ProbeFailed, finish_probe, start_probe

ENV_SCHEMA = 1
NOT_INSTALLED = "not installed"

# Distribution names to ask importlib.metadata, per package; the first one installed wins.
# ONNX Runtime ships the same `onnxruntime` module under several distributions.
PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "onnx": ("onnx",),
    "onnxruntime": (
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-directml",
        "onnxruntime-openvino",
        "onnxruntime-qnn",
        "ort-nightly",
        "ort-nightly-gpu",
    ),
    "onnxscript": ("onnxscript",),
    "onnxruntime-extensions": ("onnxruntime-extensions",),
    "typer": ("typer",),
    "rich": ("rich",),
    "pydot": ("pydot",),
}

# Libraries whose models users export, listed by `env` when installed. Those with compiled ops must
# be built for the installed torch: PyPI's torchvision wheel for Linux is a CUDA build whose C++ ops
# do not load beside a CPU torch, and then `import torchvision` (and timm, and transformers' vision
# models) fails with "operator torchvision::nms does not exist".
EXTENSIONS: tuple[str, ...] = (
    "torchvision", "torchaudio", "timm", "transformers", "optimum", "openvino", "onnxconverter-common",
)
# torch 2.N pairs with torchvision 0.(N+15) and torchaudio 2.N.
_COMPANION_MINOR_OFFSET = {"torchvision": 15, "torchaudio": 0}

# Packages without which a pipeline stage or command cannot run at all (code OD001).
_REQUIRED_FOR: dict[str, str] = {
    "torch": "exporting a model script (diagnose model.py)",
    "onnx": "checking a model (the check stage) and `graph`",
    "onnxruntime": "loading and running a model (the ort_load and ort_run stages)",
    "onnxscript": "the dynamo exporter (torch.onnx.export(..., dynamo=True), torch's default)",
    "onnxruntime-extensions": "Python kernels for custom ops in ONNX Runtime",
    "pydot": "`onnxdoctor graph`",
}

_TOOL_TIMEOUT_S = 10.0


def package_versions() -> dict[str, str]:
    """Installed versions of the stack, from package metadata only (nothing is imported).

    Returns:
        ``{"python": "3.11.7", "torch": "2.13.0+cpu", ..., "pydot": "not installed"}``; the keys
        are always the same, in the same order.
    """
    versions = {"python": platform.python_version()}
    for name, distributions in PACKAGES.items():
        versions[name] = NOT_INSTALLED
        for dist in distributions:
            try:
                versions[name] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def extension_versions() -> dict[str, str]:
    """Installed versions of the model libraries in EXTENSIONS (only those installed)."""
    found: dict[str, str] = {}
    for dist in EXTENSIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _build_tag(version: str) -> str:
    """`cpu`, `cu126`, `rocm6.3` from a local version label; PyPI's untagged Linux wheels are CUDA."""
    local = version.partition("+")[2]
    return local or "default (CUDA on Linux)"


def extension_mismatches(torch_version: str, extensions: dict[str, str]) -> list[dict[str, str]]:
    """OD099 warnings for compiled companions built for another torch (version or CPU/CUDA build)."""
    warnings: list[dict[str, str]] = []
    torch_minor = re.match(r"2\.(\d+)", torch_version)
    for name, offset in _COMPANION_MINOR_OFFSET.items():
        version = extensions.get(name)
        if version is None or torch_version == NOT_INSTALLED:
            continue
        theirs = re.match(r"\d+\.(\d+)", version)
        if torch_minor and theirs and int(theirs.group(1)) != int(torch_minor.group(1)) + offset:
            warnings.append({"code": "OD099", "message": (
                f"{name} {version} is built for another torch than torch {torch_version}; install the "
                f"{name} release made for it (same index as torch), or its compiled ops fail to load")})
            continue
        torch_tag, their_tag = _build_tag(torch_version), _build_tag(version)
        if torch_tag == "cpu" and their_tag != "cpu":
            warnings.append({"code": "OD099", "message": (
                f"{name} {version} is a {their_tag} build but torch {torch_version} is a CPU build: its "
                f"C++ ops will not load (\"operator {name}::... does not exist\"); install it from the "
                f"CPU index: pip install {name} --index-url https://download.pytorch.org/whl/cpu")})
    return warnings


# ---------------------------------------------------------------- torch exporters (no import)


def _package_dir(name: str) -> Path | None:
    """The folder of a top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def read_int_constants(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    """Module-level ``NAME = <int>`` assignments of a Python file, read with `ast` (not executed).

    Names that are missing or not plain integers are left out.
    """
    try:
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    found: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if (
            isinstance(target, ast.Name)
            and target.id in names
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
        ):
            found[target.id] = node.value.value
    return found


# Where torch 2.x keeps the exporters' limits (torch/onnx/_constants.py and the dynamo exporter's
# torch/onnx/_internal/exporter/_constants.py); both files are plain literals.
_TORCH_CONSTANTS = (
    "ONNX_MIN_OPSET",
    "ONNX_MAX_OPSET",
    "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET",
    "ONNX_DEFAULT_OPSET",
)
_DYNAMO_CONSTANTS = ("TORCHLIB_OPSET", "ONNX_IR_VERSION")


def torch_constants() -> dict[str, int]:
    """torch.onnx's opset/IR constants, read from torch's source without importing torch.

    Returns an empty dict when torch is missing or its files moved; `torch_constants_imported`
    gives the same numbers by importing torch (slow), and a test keeps the two in agreement.
    """
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        return {}
    found = read_int_constants(torch_dir / "onnx" / "_constants.py", _TORCH_CONSTANTS)
    found.update(
        read_int_constants(
            torch_dir / "onnx" / "_internal" / "exporter" / "_constants.py", _DYNAMO_CONSTANTS
        )
    )
    return found


_TORCH_IMPORT_CODE = """
import json
import torch.onnx._constants as c
from torch.onnx._internal.exporter import _constants as d
names = %r
found = {n: getattr(c, n) for n in names[0] if isinstance(getattr(c, n, None), int)}
found.update({n: getattr(d, n) for n in names[1] if isinstance(getattr(d, n, None), int)})
print(json.dumps(found))
"""


def torch_constants_imported(timeout: float = 120.0) -> dict[str, int]:
    """The same constants as `torch_constants`, by importing torch in a child process."""
    code = _TORCH_IMPORT_CODE % ((_TORCH_CONSTANTS, _DYNAMO_CONSTANTS),)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return {str(k): int(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    except (subprocess.TimeoutExpired, OSError, ValueError, IndexError):
        return {}


_OPSET_AS_OP = re.compile(
    r"^\s*from\s+onnxscript(?:\.onnx_opset)?\s+import\s+opset(\d+)\s+as\s+op\b", re.MULTILINE
)


def torchlib_opset() -> int | None:
    """The opset onnxscript's torchlib (the dynamo exporter's op library) is written against.

    Read from torchlib's sources (`from onnxscript.onnx_opset import opset18 as op`), the most
    common version wins; None when onnxscript is missing or the layout changed.
    """
    onnxscript_dir = _package_dir("onnxscript")
    if onnxscript_dir is None:
        return None
    counts: dict[int, int] = {}
    for source in sorted((onnxscript_dir / "function_libs" / "torch_lib" / "ops").glob("*.py")):
        try:
            text = source.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for match in _OPSET_AS_OP.finditer(text):
            counts[int(match.group(1))] = counts.get(int(match.group(1)), 0) + 1
    return max(counts, key=lambda v: (counts[v], v)) if counts else None


def exporter_facts(versions: dict[str, str]) -> dict[str, Any]:
    """The opset range of each torch.onnx exporter, from torch's constants and onnxscript."""
    consts = torch_constants() if versions.get("torch") != NOT_INSTALLED else {}
    torchscript = {
        "available": versions.get("torch") != NOT_INSTALLED,
        "deprecated": True,
        "min_opset": consts.get("ONNX_MIN_OPSET"),
        "max_opset": consts.get("ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET"),
        # Above max_opset it warns but still writes, up to this one; beyond it fails
        # ("Unsupported onnx_opset_version").
        "max_opset_with_warning": consts.get("ONNX_MAX_OPSET"),
        "default_opset": consts.get("ONNX_DEFAULT_OPSET"),
        "note": "torch.onnx.export(..., dynamo=False)",
    }
    native = consts.get("TORCHLIB_OPSET")
    dynamo = {
        "available": versions.get("torch") != NOT_INSTALLED
        and versions.get("onnxscript") != NOT_INSTALLED,
        "default": True,
        # The opset torchlib's functions are written in: the lowest the exporter writes natively.
        "min_opset": native,
        # Higher opsets are reached with onnx's version converter, so onnx's newest opset is the
        # ceiling; collect_env fills it in from the probe (None until then).
        "max_opset": None,
        "default_opset": consts.get("ONNX_DEFAULT_OPSET"),
        "ir_version": consts.get("ONNX_IR_VERSION"),
        "torchlib_opset": torchlib_opset(),
        "note": (
            f"torch.onnx.export(..., dynamo=True); other opsets go through onnx's version "
            f"converter and, when that fails, the model silently stays at opset {native}"
            if native
            else "torch.onnx.export(..., dynamo=True)"
        ),
    }
    return {"torchscript": torchscript, "dynamo": dynamo}


# ---------------------------------------------------------------- external tools


_TOOLS: dict[str, tuple[list[str], re.Pattern[str]]] = {
    # `dot -V` prints "dot - graphviz version 2.43.0 (0)" on stderr.
    "dot": (["dot", "-V"], re.compile(r"version\s+(\S+)")),
    # "graphviz-pure - graphviz-pure version 0.2.2 (Rust port of Graphviz 16.1.0)"
    "graphviz-pure": (["graphviz-pure", "-V"], re.compile(r"graphviz-pure version\s+(\S+)")),
    # `nvcc --version` ends with "Cuda compilation tools, release 13.0, V13.0.88".
    "nvcc": (["nvcc", "--version"], re.compile(r"release\s+[\d.]+,\s*V(\S+)|release\s+([\d.]+)")),
    # A visible NVIDIA GPU, for the GPU targets: the first device's name ("NVIDIA H200").
    "nvidia-smi": (["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], re.compile(r"^\s*(\S[^\n]*)")),
}


def _start_tools() -> dict[str, tuple[str, subprocess.Popen[str] | None]]:
    started: dict[str, tuple[str, subprocess.Popen[str] | None]] = {}
    for name, (argv, _) in _TOOLS.items():
        path = shutil.which(argv[0])
        proc = None
        if path:
            try:
                proc = subprocess.Popen(
                    [path, *argv[1:]],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            except OSError:
                proc = None
        started[name] = (path or "", proc)
    return started


def _finish_tools(started: dict[str, tuple[str, subprocess.Popen[str] | None]]) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for name, (path, proc) in started.items():
        entry: dict[str, Any] = {"found": bool(path), "path": path or None, "version": None}
        if proc is not None:
            try:
                out, _ = proc.communicate(timeout=_TOOL_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            match = _TOOLS[name][1].search(out or "")
            if match:
                entry["version"] = next(g for g in match.groups() if g)
        tools[name] = entry
    return tools


def mismatch_warnings(env: dict[str, Any]) -> list[dict[str, str]]:
    """Warnings for pieces that do not fit together, each with its code.

    Pure: works on the dict `collect_env` builds (or any dict of that shape).
    """
    warnings: list[dict[str, str]] = []
    versions: dict[str, str] = env.get("versions", {})
    warnings += extension_mismatches(versions.get("torch", NOT_INSTALLED), env.get("extensions", {}))
    for package, needed_for in _REQUIRED_FOR.items():
        if versions.get(package) == NOT_INSTALLED:
            warnings.append(
                {
                    "code": "OD001",
                    "message": f"{package} is not installed; it is needed for {needed_for}",
                }
            )

    onnx_facts: dict[str, Any] = env.get("onnx", {})
    ort: dict[str, Any] = env.get("onnxruntime", {})
    for side, facts in (("onnx", onnx_facts), ("onnxruntime", ort)):
        if facts.get("installed") and facts.get("error"):
            warnings.append(
                {"code": "OD099", "message": f"could not inspect {side}: {facts['error']}"}
            )

    warnings += _runtime_gaps(env)
    dot = env.get("tools", {}).get("dot", {})
    pure = env.get("tools", {}).get("graphviz-pure", {})
    if dot and not dot.get("found") and not pure.get("found"):
        warnings.append(
            {
                "code": "OD002",
                "message": "Graphviz `dot` is not on PATH; `graph` can only write .dot files "
                "(install it: apt-get install graphviz, brew install graphviz, "
                "or conda install graphviz)",
            }
        )
    return warnings


def _runtime_gaps(env: dict[str, Any]) -> list[dict[str, str]]:
    """OD003: what onnx or an exporter writes (opset, IR version) that ONNX Runtime cannot load."""
    warnings: list[dict[str, str]] = []
    onnx_facts: dict[str, Any] = env.get("onnx", {})
    ort: dict[str, Any] = env.get("onnxruntime", {})
    ort_opset, ort_ir = ort.get("max_opset"), ort.get("max_ir_version")
    ort_version = ort.get("version", "")
    if isinstance(ort_opset, int):
        writers: list[tuple[str, Any]] = [
            ("onnx's newest opset (onnx.defs.onnx_opset_version())", onnx_facts.get("max_opset")),
            (
                "the dynamo exporter's default opset",
                env.get("exporters", {}).get("dynamo", {}).get("default_opset"),
            ),
            (
                "the TorchScript exporter's highest opset",
                env.get("exporters", {}).get("torchscript", {}).get("max_opset"),
            ),
        ]
        for who, opset in writers:
            if isinstance(opset, int) and opset > ort_opset:
                warnings.append(
                    {
                        "code": "OD003",
                        "message": f"{who} is {opset}, but ONNX Runtime {ort_version} loads "
                        f"opsets up to {ort_opset}; models written at opset {opset} will not load "
                        f"(export with opset_version={ort_opset} or upgrade onnxruntime)",
                    }
                )
    if isinstance(ort_ir, int):
        ir_writers: list[tuple[str, Any]] = [
            (
                "onnx's IR version (onnx.IR_VERSION, used by onnx.helper.make_model)",
                onnx_facts.get("ir_version"),
            ),
            (
                "the dynamo exporter's IR version",
                env.get("exporters", {}).get("dynamo", {}).get("ir_version"),
            ),
        ]
        for who, ir_version in ir_writers:
            if isinstance(ir_version, int) and ir_version > ort_ir:
                warnings.append(
                    {
                        "code": "OD003",
                        "message": f"{who} is {ir_version}, but ONNX Runtime {ort_version} loads "
                        f"IR versions up to {ort_ir}; such models will not load "
                        "(set model.ir_version "
                        f"= {ort_ir} or upgrade onnxruntime)",
                    }
                )
    return warnings


# ---------------------------------------------------------------- public API and command


def target_availability(providers: list[str] | None = None) -> list[dict[str, Any]]:
    """Each deployment target (docs/targets.md): can it be checked here, and with what.

    `providers`: ONNX Runtime's execution providers as the probe found them (GPU targets).
    """
    from onnxdoctor.targets import TARGETS, available

    rows = []
    for info in TARGETS:
        ok, detail = available(info.name, providers)
        rows.append({"target": info.name, "available": ok, "kind": info.kind, "detail": detail})
    return rows


def probe_runtime(timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """onnx's and ONNX Runtime's facts, gathered in a child process (onnxdoctor.envprobe).

    Returns ``{"onnx": {...}, "onnxruntime": {...}}``; when the child fails or times out both hold
    ``"installed"`` from package metadata and an ``"error"`` line instead of the facts.
    """
    return _probe_facts(start_probe(), timeout)


def _probe_facts(probe: Any, timeout: float) -> dict[str, Any]:
    try:
        return finish_probe(probe, timeout)
    except ProbeFailed as exc:
        return _probe_failed(str(exc))


def _probe_failed(reason: str) -> dict[str, Any]:
    versions = package_versions()
    return {
        "onnx": {"installed": versions["onnx"] != NOT_INSTALLED, "error": reason},
        "onnxruntime": {"installed": versions["onnxruntime"] != NOT_INSTALLED, "error": reason},
    }


def collect_env(timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Everything `onnxdoctor env` reports, as plain data (the `env --json` schema).

    Runs the ONNX Runtime probe and the `dot`/`nvcc` version queries concurrently, each in its own
    process; this process imports none of torch, onnx, onnxruntime.

    Args:
        timeout: seconds the child probing onnx/ONNX Runtime may take before it is stopped.

    Returns:
        ``{"schema": 1, "versions", "exporters", "onnx", "onnxruntime", "tools", "warnings"}``.
    """
    versions = package_versions()
    probe = start_probe() if versions["onnx"] != NOT_INSTALLED else None
    tools_started = _start_tools()
    exporters = exporter_facts(versions)  # file reads while the children work
    facts = _probe_facts(probe, timeout) if probe else _probe_failed("onnx is not installed")
    if versions["onnx"] == NOT_INSTALLED:
        facts["onnx"].pop("error", None)  # OD001 already says so
        if facts["onnxruntime"]["installed"]:
            facts["onnxruntime"]["error"] = "not probed: the probe builds its test models with onnx"
        else:
            facts["onnxruntime"].pop("error", None)
    if exporters["dynamo"]["available"]:
        exporters["dynamo"]["max_opset"] = facts["onnx"].get("max_opset")
    env: dict[str, Any] = {
        "schema": ENV_SCHEMA,
        "versions": versions,
        "extensions": extension_versions(),
        "exporters": exporters,
        "onnx": facts["onnx"],
        "onnxruntime": facts["onnxruntime"],
        "tools": _finish_tools(tools_started),
        "probe_seconds": facts.get("seconds"),
        "targets": target_availability(facts["onnxruntime"].get("providers")),
    }
    env["warnings"] = mismatch_warnings(env)
    return env
