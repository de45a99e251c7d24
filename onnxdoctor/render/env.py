"""`onnxdoctor env` on a terminal: versions, opset and IR ranges, tools, mismatches."""

from __future__ import annotations

from typing import Any

from onnxdoctor.envinfo import NOT_INSTALLED


def _fmt(value: Any, missing: str = "unknown") -> str:
    return missing if value is None else str(value)


def _opset_range(low: Any, high: Any) -> str:
    return f"{_fmt(low)}-{_fmt(high)}" if low is not None or high is not None else "unknown"


def render_env(env: dict[str, Any], console: Any) -> None:
    """Print `collect_env`'s result as a rich table on `console` (a rich Console)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("")
    table.add_column("")
    # Paths and provider lists are long words: wrap them (fold) rather than cut them with "…".
    table.add_column("", overflow="fold")
    for section in (_packages, _exporters, _runtimes, _tools, _targets):
        section(env, table)
        table.add_section()
    console.print(table)
    for warning in env["warnings"]:
        console.print(f"[yellow]warning[/] [bold]{warning['code']}[/] {escape(warning['message'])}")
    if not env["warnings"]:
        console.print("[green]no mismatches found[/]")


def _packages(env: dict[str, Any], table: Any) -> None:
    from rich.markup import escape

    versions: dict[str, str] = env["versions"]
    for index, (name, version) in enumerate(versions.items()):
        style = "red" if version == NOT_INSTALLED else ""
        table.add_row(
            "packages" if index == 0 else "",
            name,
            f"[{style}]{escape(version)}[/]" if style else escape(version),
        )
    for index, (name, version) in enumerate(env.get("extensions", {}).items()):
        table.add_row("model libraries" if index == 0 else "", name, escape(version))


def _exporters(env: dict[str, Any], table: Any) -> None:
    ts, dyn = env["exporters"]["torchscript"], env["exporters"]["dynamo"]
    if ts["available"]:
        table.add_row(
            "exporters",
            "TorchScript (dynamo=False)",
            f"opsets {_opset_range(ts['min_opset'], ts['max_opset'])} "
            f"(up to {_fmt(ts['max_opset_with_warning'])} with a warning), "
            f"default {_fmt(ts['default_opset'])}; deprecated",
        )
    else:
        table.add_row(
            "exporters", "TorchScript (dynamo=False)", "unavailable (torch not installed)"
        )
    if dyn["available"]:
        table.add_row(
            "",
            "dynamo (dynamo=True, default)",
            f"opset {_fmt(dyn['min_opset'])} natively "
            f"(torchlib: opset {_fmt(dyn['torchlib_opset'])}), "
            f"{_opset_range(dyn['min_opset'], dyn['max_opset'])} by version conversion, "
            f"default {_fmt(dyn['default_opset'])}; writes IR {_fmt(dyn['ir_version'])}",
        )
        table.add_row(
            "",
            "",
            "[dim]a failed conversion silently leaves the model at opset "
            f"{_fmt(dyn['min_opset'])}[/]",
        )
    else:
        table.add_row(
            "", "dynamo (dynamo=True, default)", "unavailable (needs torch and onnxscript)"
        )


def _runtimes(env: dict[str, Any], table: Any) -> None:
    from rich.markup import escape

    onnx_facts, ort = env["onnx"], env["onnxruntime"]
    if onnx_facts.get("max_opset") is not None:
        table.add_row(
            "onnx",
            "newest opset / IR version",
            f"{onnx_facts['max_opset']} / {onnx_facts['ir_version']}",
        )
    else:
        table.add_row(
            "onnx", "newest opset / IR version", escape(onnx_facts.get("error") or NOT_INSTALLED)
        )
    if ort.get("max_opset") is not None:
        table.add_row(
            "onnxruntime",
            "loads opsets / IR versions up to",
            f"{ort['max_opset']} / {_fmt(ort.get('max_ir_version'))} [dim](probed)[/]",
        )
        table.add_row("", "execution providers", escape(", ".join(ort.get("providers", []))))
    else:
        table.add_row(
            "onnxruntime",
            "loads opsets / IR versions up to",
            escape(ort.get("error") or NOT_INSTALLED),
        )


def _tools(env: dict[str, Any], table: Any) -> None:
    from rich.markup import escape

    labels = (("dot", "Graphviz dot"), ("graphviz-pure", "graphviz-pure"), ("nvcc", "CUDA nvcc"),
              ("nvidia-smi", "GPU (nvidia-smi)"))
    for index, (name, label) in enumerate(labels):
        tool = env["tools"].get(name, {"found": False})
        value = (
            f"{_fmt(tool['version'], 'version unknown')}  [dim]{escape(tool['path'])}[/]"
            if tool["found"]
            else ("none visible (nvidia-smi not found)" if name == "nvidia-smi" else "not found")
        )
        table.add_row("tools" if index == 0 else "", label, value)


def _targets(env: dict[str, Any], table: Any) -> None:
    from rich.markup import escape

    for index, row in enumerate(env.get("targets", ())):
        mark = "[green]available[/]" if row["available"] else "[yellow]not available[/]"
        table.add_row("targets" if index == 0 else "", row["target"], f"{mark}  [dim]{escape(row['detail'])}[/]")
