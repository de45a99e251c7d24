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


def _web_ranges(cell: str) -> list[list[int | None]]:
    """`6-12,13+` -> [[6, 12], [13, None]]; `11` -> [[11, 11]] (the versions a kernel is registered for)."""
    ranges: list[list[int | None]] = []
    for part in (p.strip() for p in cell.split(",")):
        if not part:
            continue
        if part.endswith("+"):
            ranges.append([int(part[:-1]), None])
        elif "-" in part:
            low, high = part.split("-", 1)
            ranges.append([int(low), int(high)])
        else:
            ranges.append([int(part), int(part)])
    return ranges


# Domains of ONNX Runtime Web's list that a model names (com.ms.internal.nhwc is ONNX Runtime's own
# layout-transformed copy of an ai.onnx op, never in an exported model).
_WEB_DOMAINS = {"ai.onnx": "", "com.microsoft": "com.microsoft"}


def parse_webgpu(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """ONNX Runtime Web's webgpu-operators.md: | Operator | Opset | Comments |.

    The Opset cell names each domain with its registered versions: `ai.onnx(6-12,13+);
    com.microsoft(1+)`. One row per (domain, op) a model can name, with `ranges` (since, until;
    null: open-ended) and `min_opset`.
    """
    rows = []
    for line in text.splitlines():
        m = re.match(r"\|\s*(\w+)\s*\|\s*(.+?)\s*\|\s*(.*?)\s*\|\s*$", line)
        if not m or m.group(1) == "Operator":
            continue
        for domain_name, cell in re.findall(r"([\w.]+)\(([^)]*)\)", m.group(2)):
            if domain_name not in _WEB_DOMAINS:
                continue
            ranges = _web_ranges(cell)
            if not ranges:
                continue
            rows.append({"op": m.group(1), "domain": _WEB_DOMAINS[domain_name], "status": "supported", "types": [],
                         "min_opset": min(r[0] for r in ranges), "opsets": cell, "ranges": ranges,
                         "restrictions": _clean(m.group(3)), "rules": []})
    return rows, {}


# ONNX Runtime's OperatorKernels.md writes types as `tensor(float16)`, `seq(tensor(int64))`.
_ORT_TYPE = re.compile(r"(seq\()?tensor\((\w+)\)\)?")


def _ort_opsets(cell: str) -> dict[str, Any]:
    """`13+`, `[7, 12]` or `11` -> the since/until versions of one kernel registration."""
    cell = cell.strip()
    m = re.fullmatch(r"\[(\d+),\s*(\d+)\]", cell)
    if m:
        return {"opsets": cell, "since": int(m.group(1)), "until": int(m.group(2))}
    m = re.fullmatch(r"(\d+)(\+?)", cell)
    if not m:
        raise ValueError(f"unrecognised opset cell {cell!r}")
    since = int(m.group(1))
    return {"opsets": cell, "since": since, "until": None if m.group(2) else since}


def _ort_constraints(cell: str) -> dict[str, list[str]]:
    """`**T** = tensor(double), tensor(float)<br/> **T1** = ...` -> {"T": ["DOUBLE", "FLOAT"], ...}.

    Tensor types become onnx.TensorProto element type names; sequences are kept as `seq(NAME)`.
    """
    out: dict[str, list[str]] = {}
    for part in re.split(r"<br\s*/?>", cell):
        m = re.match(r"\s*\*\*(\w+)\*\*\s*=\s*(.*)", part)
        if not m:
            continue
        names = []
        for seq, name in _ORT_TYPE.findall(m.group(2)):
            names.append(f"seq({name.upper()})" if seq else name.upper())
        out[m.group(1)] = names
    return out


def parse_ort_kernels(text: str, provider: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One execution provider's section of ONNX Runtime's docs/OperatorKernels.md.

    Rows: `|Op|Parameters|OpSet Version|Types Supported|`, then `|||OpSet|Types|` for the op's other
    kernel registrations; `|**Operator Domain:** *ai.onnx*||||` switches the domain. The whole
    document or just the provider's section may be given.
    """
    start = text.find(f"Operators implemented by {provider}")
    if start < 0:
        raise ValueError(f"no section for {provider} in the document")
    section = text[start:]
    following = section.find("<a name=", 1)
    if following > 0:
        section = section[:following]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    domain = ""
    current: dict[str, Any] | None = None
    for line in section.splitlines():
        m = re.match(r"\|\*\*Operator Domain:\*\*\s*\*([\w.]+)\*", line)
        if m:
            domain = "" if m.group(1) == "ai.onnx" else m.group(1)
            current = None
            continue
        if not line.startswith("|") or line.startswith(("| Op Name", "|---")) or not line.strip("| "):
            continue
        # Not strip("|"): a continuation row starts with empty cells (`|||13+|...|`).
        cells = line.strip()[1:-1].split("|")
        if len(cells) != 4:
            raise ValueError(f"unexpected row in {provider}'s table: {line[:80]!r}")
        op, _params, opsets, types = cells
        if op:
            key = (domain, op)
            current = rows.setdefault(key, {"op": op, "domain": domain, "status": "supported",
                                            "kernels": [], "restrictions": "", "rules": []})
        if current is None:
            raise ValueError(f"kernel row before any op in {provider}'s table: {line[:80]!r}")
        current["kernels"].append({**_ort_opsets(opsets), "constraints": _ort_constraints(types)})
    for row in rows.values():
        row["types"] = sorted({t for k in row["kernels"] for ts in k["constraints"].values()
                               for t in ts if not t.startswith("seq(")})
    return list(rows.values()), {}


def parse_ort_cuda(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The CUDAExecutionProvider section of ONNX Runtime's docs/OperatorKernels.md."""
    return parse_ort_kernels(text, "CUDAExecutionProvider")


PARSERS = {"tensorrt": parse_tensorrt, "coreml": parse_coreml, "ort-web": parse_webgpu,
           "ort-cuda": parse_ort_cuda}
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
    # ONNX Runtime places a node the CUDA provider has no kernel for on its CPU provider: the model
    # still runs, with copies between the devices (docs/targets.md).
    "ort-cuda": "fallback",
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
            "commit": meta.get("commit"),
            "version": version,
            # When the document dates from (its commit's, or its release package's date).
            "date": meta.get("date"),
            # A document taken from a runtime's release package rather than a repository commit.
            **({"package": meta["package"]} if meta.get("package") else {}),
            "document_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            # A stored excerpt (one provider's section of a large document) says so.
            **({"extract": meta["extract"]} if meta.get("extract") else {}),
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
