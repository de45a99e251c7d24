"""Regenerate onnxdoctor/targets/tables/*.json from each runtime's published operator-support document.

The documents are not part of this repository. Bring them here first (see docs/targets.md), into
one folder (default: build/capability_docs/) with a `sources.json` that says, per document, the
repository, path, commit and runtime version it comes from:

    {"tensorrt": {"file": "tensorrt_operators.md", "repository": "onnx/onnx-tensorrt",
                  "path": "docs/operators.md", "commit": "...", "version": "10.0"}, ...}

Then: `python scripts/regen_capability_tables.py [--docs DIR] [--out DIR] [--check]`.
`--check` compares with the shipped tables and exits 1 when they differ.

Restriction texts are turned into machine-checkable rules only where the wording is mechanical
("`axes` must be an initializer", "2D or 3D pooling only", "`dilations` must be empty or all
ones"); every other restriction is kept as text and reported as not checked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = ROOT / "build" / "capability_docs"
DEFAULT_OUT = ROOT / "onnxdoctor" / "targets" / "tables"
TABLE_FORMAT = 1

# TensorRT's type names -> ONNX tensor element type names (onnx.TensorProto.DataType names).
TRT_TYPES = {
    "FP32": "FLOAT", "FP16": "FLOAT16", "BF16": "BFLOAT16", "INT32": "INT32", "INT64": "INT64",
    "INF64": "INT64",  # a typo in the source table (ConstantOfShape)
    "UINT8": "UINT8", "BOOL": "BOOL", "INT8": "INT8", "INT4": "INT4", "FP8": "FLOAT8E4M3FN",
    "DOUBLE": "DOUBLE",
}


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("<br/>", " ").replace("<br />", " ")).strip()


def rules_from_text(op: str, text: str) -> list[dict[str, Any]]:
    """Machine-checkable rules found in one restriction text; unrecognised wording yields none."""
    rules: list[dict[str, Any]] = []
    low = text.lower()
    # "`axes` must be an initializer" / "must be a constant tensor" / "`splits` must be constant"
    for name in re.findall(r"`(\w+)`\s+(?:input\s+)?must be (?:an initializer|a constant|constant)", text):
        rules.append({"kind": "constant_input", "input": name, "text": text})
    m = re.search(r"input (\w+) must be constant", low)
    if m:
        rules.append({"kind": "constant_input", "input": m.group(1).upper(), "text": text})
    if "weight and bias must be constant" in low:
        rules += [{"kind": "constant_input", "input": n, "text": text} for n in ("W", "B")]
    if "bias if provided must be constant" in low:
        rules.append({"kind": "constant_input", "input": "B", "text": text})
    m = re.search(r"((?:\w+/)*\w+) must be constant initializers", low)
    if m:
        rules += [{"kind": "constant_input", "input": n, "text": text} for n in m.group(1).split("/")]
    for attr in re.findall(r"`(\w+)` must be empty or all ones", text):
        rules.append({"kind": "attribute_all_ones", "attribute": attr, "text": text})
    m = re.search(r"`?(\w+)`? (?:attribute )?must be (\d+)\b", text)
    if m and m.group(1) not in ("input",):
        rules.append({"kind": "attribute_equals", "attribute": m.group(1), "value": int(m.group(2)), "text": text})
    # Ranks: spatial dimensions + batch + channel.
    if re.search(r"2d or 3d pool", low):
        rules.append({"kind": "input_rank", "input": 0, "ranks": [4, 5], "text": text})
    elif re.search(r"only 2d pool", low):
        rules.append({"kind": "input_rank", "input": 0, "ranks": [4], "text": text})
    if re.search(r"only 1d/2d conv", low):
        rules.append({"kind": "input_rank", "input": 0, "ranks": [3, 4], "text": text})
    if re.search(r"(?:must be )?4d input", low):
        rules.append({"kind": "input_rank", "input": 0, "ranks": [4], "text": text})
    if "both inputs are fp32" in low:
        rules.append({"kind": "input_types", "types": ["FLOAT"], "text": text})
    return rules


def parse_tensorrt(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """onnx-tensorrt's docs/operators.md: | Operator | Supported | Supported Types | Restrictions |."""
    extra: dict[str, Any] = {}
    m = re.search(r"TensorRT ([\d.]+) supports operators in the inclusive range of opset (\d+) to opset (\d+)", text)
    if m:
        extra = {"runtime_version": m.group(1), "min_opset": int(m.group(2)), "max_opset": int(m.group(3))}
    rows = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("| Operator"):
            in_table = True
            continue
        if not in_table or not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        op, flag = cells[0], cells[1] if len(cells) > 1 else ""
        types_cell = cells[2] if len(cells) > 2 else ""
        restriction = _clean(cells[3]) if len(cells) > 3 else ""
        types = sorted({TRT_TYPES[t.strip()] for t in types_cell.split(",") if t.strip() in TRT_TYPES})
        row: dict[str, Any] = {
            "op": op,
            "domain": "",
            "status": "supported" if flag == "Y" else "unsupported",
            "types": types,
            "restrictions": restriction,
            "rules": rules_from_text(op, restriction) if flag == "Y" else [],
        }
        rows.append(row)
    return rows, extra


def parse_coreml(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """ONNX Runtime's coreml_supported_mlprogram_ops.md: |domain:Op|Note|."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\|([\w.]+):(\w+)\|(.*)\|\s*$", line)
        if not m:
            continue
        domain = "" if m.group(1) == "ai.onnx" else m.group(1)
        note = _clean(m.group(3))
        op = m.group(2)
        if op == "Argmax":  # the document's spelling; the ONNX op is ArgMax
            op = "ArgMax"
        rows.append({"op": op, "domain": domain, "status": "supported", "types": [],
                     "restrictions": note, "rules": rules_from_text(op, note)})
    return rows, {}


def parse_webgpu(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """ONNX Runtime Web's webgpu-operators.md: | Operator | Opset | Comments |."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\|\s*(\w+)\s*\|\s*(.+?)\s*\|\s*(.*?)\s*\|\s*$", line)
        if not m or m.group(1) == "Operator":
            continue
        ranges = re.search(r"ai\.onnx\(([^)]*)\)", m.group(2))
        if not ranges:
            continue
        starts = [int(r.split("-")[0].rstrip("+")) for r in ranges.group(1).split(",") if r.strip()]
        rows.append({"op": m.group(1), "domain": "", "status": "supported", "types": [],
                     "min_opset": min(starts), "opsets": ranges.group(1),
                     "restrictions": _clean(m.group(3)), "rules": []})
    return rows, {}


PARSERS = {"tensorrt": parse_tensorrt, "coreml": parse_coreml, "ort-web": parse_webgpu}
RUNTIMES = {
    "tensorrt": "TensorRT ONNX parser (onnx-tensorrt)",
    "coreml": "ONNX Runtime CoreML execution provider (ML Program)",
    "ort-web": "ONNX Runtime Web, WebGPU execution provider",
    "ort-cuda": "ONNX Runtime CUDA execution provider",
}
# What an op missing from the document means for each target.
ABSENT = {
    "tensorrt": "unsupported",  # the parser's table lists every ONNX op it knows; others need a plugin
    "coreml": "unsupported",  # ONNX Runtime runs it on CPU instead: the model is split
    "ort-web": "unsupported",
}


def build_table(target: str, meta: dict[str, Any], text: str) -> dict[str, Any]:
    """One table: its source (repository, path, commit, version, document hash) and its rows."""
    rows, extra = PARSERS[target](text)
    version = str(meta.get("version") or extra.get("runtime_version") or "")
    for row in rows:
        row["source_version"] = version
    return {
        "format": TABLE_FORMAT,
        "target": target,
        "runtime": RUNTIMES[target],
        "static": True,
        "source": {
            "repository": meta["repository"],
            "path": meta["path"],
            "commit": meta["commit"],
            "version": version,
            "document_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        },
        "absent_op": ABSENT[target],
        **{k: v for k, v in extra.items() if k != "runtime_version"},
        "ops": sorted(rows, key=lambda r: (r["domain"], r["op"])),
    }


def regenerate(docs: Path) -> dict[str, str]:
    """Every table the documents in `docs` allow, as target -> JSON text."""
    sources = json.loads((docs / "sources.json").read_text("utf-8"))
    out = {}
    for target, meta in sorted(sources.items()):
        if target not in PARSERS:
            continue
        text = (docs / meta["file"]).read_text("utf-8")
        out[target] = json.dumps(build_table(target, meta, text), indent=1, sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check compare) the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if not (args.docs / "sources.json").is_file():
        print(f"no {args.docs / 'sources.json'}: bring the source documents there first", file=sys.stderr)
        return 2
    tables = regenerate(args.docs)
    differ = []
    for target, text in tables.items():
        path = args.out / f"{target}.json"
        if args.check:
            if not path.is_file() or path.read_text("utf-8") != text:
                differ.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")
            print(f"wrote {path} ({len(json.loads(text)['ops'])} ops)")
    if differ:
        print("differ from the documents: " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
