"""The code table and its explanations: well-formed, complete, and reachable from the CLI."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from onnxdoctor.cli import app
from onnxdoctor.codes import CODES, Code, catch_all, explanation, get_code
from onnxdoctor.model import Stage

EXPLANATIONS = Path(__file__).resolve().parent.parent / "onnxdoctor" / "explanations"
SECTIONS = ("## What it means", "## Why it happens", "## How to fix", "## Example")

# DESIGN §3.3: the hundreds digit is the stage; 0 (environment) and 9 (the tool) both report
# against Stage.TOOL.
STAGE_OF_DIGIT = {
    "0": Stage.TOOL,
    "1": Stage.LOAD,
    "2": Stage.EXPORT,
    "3": Stage.CHECK,
    "4": Stage.ORT_LOAD,
    "5": Stage.ORT_RUN,
    "6": Stage.PARITY,
    "7": Stage.TARGET,
    "8": Stage.SHAPES,
    "9": Stage.TOOL,
}

# APIs that do not exist in torch 2.13 / onnxruntime 1.32 (DESIGN §2). An explanation may name
# one only to say so, on the same line.
NONEXISTENT_APIS = ("enable_onnx_checker", "export_raw_ir", "register_shape_inference", "OpKernel")
PLACEHOLDER = re.compile(
    r"\b(TODO|TBD|FIXME|XXX|lorem ipsum)\b|<(fill|placeholder|code|slug)[^>]*>", re.I
)

runner = CliRunner()


def _ids(codes: tuple[Code, ...]) -> list[str]:
    return [c.code for c in codes]


# ---------------------------------------------------------------- the table


def test_codes_are_OD_and_three_digits() -> None:
    bad = [c.code for c in CODES if not re.fullmatch(r"OD\d{3}", c.code)]
    assert bad == []


def test_codes_and_slugs_are_unique() -> None:
    assert len({c.code for c in CODES}) == len(CODES)
    assert len({c.slug for c in CODES}) == len(CODES)


def test_slugs_are_lowercase_kebab_case() -> None:
    bad = [c.slug for c in CODES if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", c.slug)]
    assert bad == []


def test_codes_are_listed_in_order() -> None:
    # Readers scan the table (and `codes`) by number; a new code goes in its place.
    assert _ids(CODES) == sorted(_ids(CODES))


def test_hundreds_digit_is_the_stage() -> None:
    wrong = [(c.code, c.stage.value) for c in CODES if STAGE_OF_DIGIT.get(c.code[2]) is not c.stage]
    assert wrong == []


@pytest.mark.parametrize("digit", sorted(STAGE_OF_DIGIT))
def test_each_hundred_has_its_xx99_catch_all(digit: str) -> None:
    entry = get_code(f"OD{digit}99")
    assert entry.stage is STAGE_OF_DIGIT[digit]


@pytest.mark.parametrize("stage", list(Stage), ids=lambda s: s.value)
def test_catch_all_of_each_stage_is_an_xx99_of_that_stage(stage: Stage) -> None:
    entry = get_code(catch_all(stage))
    assert entry.code.endswith("99")
    assert entry.stage is stage


def test_summaries_are_one_line() -> None:
    bad = [c.code for c in CODES if not c.summary.strip() or "\n" in c.summary]
    assert bad == []


def test_get_code_is_case_insensitive_and_refuses_unknown_codes() -> None:
    assert get_code("od203").code == "OD203"
    with pytest.raises(KeyError):
        get_code("OD777")


# ---------------------------------------------------------------- the explanations


@pytest.mark.parametrize("entry", CODES, ids=_ids(CODES))
def test_every_code_has_a_complete_explanation(entry: Code) -> None:
    path = EXPLANATIONS / f"{entry.code}.md"
    assert path.is_file(), f"missing {path.name}"
    text = path.read_text("utf-8")
    assert text == explanation(entry.code)
    lines = text.splitlines()
    assert lines[0] == f"# {entry.code} {entry.slug}"
    headings = [line for line in lines if line.startswith("#")]
    code_fences = text.count("```")
    assert code_fences % 2 == 0, "unbalanced code fence"
    # Only the title and the four sections, in order; '#' lines inside code blocks are comments.
    outside = _outside_code_blocks(text)
    assert [h for h in outside if h.startswith("#")] == [lines[0], *SECTIONS], headings
    bodies = re.split(r"^## .*$", text, flags=re.M)[1:]
    assert all(body.strip() for body in bodies), "empty section"
    assert PLACEHOLDER.search(text) is None


def _outside_code_blocks(text: str) -> list[str]:
    kept, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            kept.append(line)
    return kept


def test_no_explanation_without_a_code() -> None:
    known = {c.code for c in CODES}
    orphans = sorted(
        p.name for p in EXPLANATIONS.iterdir() if p.stem not in known or p.suffix != ".md"
    )
    assert orphans == []


@pytest.mark.parametrize("entry", CODES, ids=_ids(CODES))
def test_python_snippets_in_explanations_parse(entry: Code) -> None:
    text = explanation(entry.code)
    for block in re.findall(r"^ *```python\n(.*?)^ *```", text, flags=re.M | re.S):
        lines = block.splitlines()
        indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
        ast.parse("\n".join(ln[indent:] for ln in lines))


def test_nonexistent_apis_are_only_named_to_say_they_do_not_exist() -> None:
    offending = []
    for path in sorted(EXPLANATIONS.glob("*.md")):
        text = " ".join(path.read_text("utf-8").split())  # sentences may wrap lines
        for sentence in re.split(r"(?<=[.:])\s", text):
            for api in NONEXISTENT_APIS:
                if api in sentence and not re.search(
                    r"(does not|no longer) exist|has no", sentence
                ):
                    offending.append((path.name, api, sentence[:120]))
    assert offending == []


def test_aten_fallback_is_never_offered_for_onnx_runtime_cpu() -> None:
    # Wherever ATen fallback is mentioned, the same explanation says ORT's CPU provider cannot run it.
    for path in sorted(EXPLANATIONS.glob("*.md")):
        text = " ".join(path.read_text("utf-8").split())
        if "ATEN_FALLBACK" in text or "ATen fallback" in text:
            assert re.search(r"CPU provider (has no|cannot run|registers no)", text), path.name


# ---------------------------------------------------------------- the CLI


def test_explain_prints_the_explanation_by_code() -> None:
    result = runner.invoke(app, ["explain", "OD203"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == explanation("OD203").strip()


def test_explain_accepts_a_slug_and_lowercase() -> None:
    by_slug = runner.invoke(app, ["explain", "unregistered-custom-op"])
    by_lower = runner.invoke(app, ["explain", "od203"])
    assert by_slug.exit_code == by_lower.exit_code == 0
    assert by_slug.stdout == by_lower.stdout == runner.invoke(app, ["explain", "OD203"]).stdout


@pytest.mark.parametrize("entry", CODES, ids=_ids(CODES))
def test_explain_works_for_every_code(entry: Code) -> None:
    result = runner.invoke(app, ["explain", entry.slug])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"# {entry.code} {entry.slug}")


def test_unknown_code_is_a_usage_error() -> None:
    result = runner.invoke(app, ["explain", "OD777"])
    assert result.exit_code == 2
    assert "OD777" in result.output
    assert "Traceback" not in result.output


def test_unknown_code_is_one_line() -> None:
    result = runner.invoke(app, ["explain", "OD777"])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_codes_json_lists_every_code() -> None:
    result = runner.invoke(app, ["codes", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema"] == 1
    assert [row["code"] for row in data["codes"]] == _ids(CODES)
    for row, entry in zip(data["codes"], CODES, strict=True):
        assert row == {
            "code": entry.code,
            "slug": entry.slug,
            "stage": entry.stage.value,
            "group": "environment" if entry.code[2] == "0" else entry.stage.value,
            "severity": entry.severity.value,
            "summary": entry.summary,
        }


def test_codes_table_lists_every_code() -> None:
    result = runner.invoke(app, ["codes"])
    assert result.exit_code == 0, result.output
    missing = [c.code for c in CODES if c.code not in result.stdout]
    assert missing == []


# ---------------------------------------------------------------- the snippets really work

_SNIPPET_RUNNER = """
import json, logging, os, runpy, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
import numpy as np
import onnx
import onnxruntime as ort
import torch


@torch.library.custom_op("mynamespace::myselu", mutates_args=())
def myselu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@myselu.register_fake
def _(x):
    return torch.empty_like(x)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.ops.mynamespace.myselu(x)


blocks, kernel_block = json.loads(sys.stdin.read())
results = []
# Run each snippet from a file: onnxscript.script reads its function's source.
def run_snippet(name, text, init):
    with open(name, "w") as f:
        f.write(text)
    return runpy.run_path(name, init_globals=init)


for index, block in enumerate(blocks):
    for leftover in ("model.onnx", "model.onnx.data"):
        if os.path.exists(leftover):
            os.remove(leftover)
    context = {"torch": torch, "model": Model().eval(), "x": torch.randn(2, 3)}
    namespace = run_snippet(f"fix{index}.py", block, context)
    x = namespace["x"]
    domains = sorted({n.domain or "ai.onnx" for n in onnx.load("model.onnx").graph.node})
    try:
        session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
        kernel = False
    except Exception:  # a custom-domain node: load it the way OD401 says
        session, kernel = run_snippet("kernel.py", kernel_block, {})["session"], True
    (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    diff = float(np.abs(y - (x * torch.sigmoid(x)).numpy()).max())
    results.append({"domains": domains, "kernel": kernel, "max_abs_diff": diff})
print(json.dumps(results))
"""


def _python_blocks(code: str) -> list[str]:
    blocks = []
    for block in re.findall(r"^ *```python\n(.*?)^ *```", explanation(code), flags=re.M | re.S):
        lines = block.splitlines()
        indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
        blocks.append("\n".join(ln[indent:] for ln in lines))
    return blocks


@pytest.mark.slow
def test_OD203_fixes_export_and_run_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime_extensions")
    import subprocess
    import sys

    fixes = _python_blocks("OD203")
    (kernel,) = _python_blocks("OD401")
    assert len(fixes) == 4  # decomposition, onnxscript std ops, TorchScript symbolic, custom domain
    proc = subprocess.run(
        [sys.executable, "-c", _SNIPPET_RUNNER],
        input=json.dumps([fixes, kernel]),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["domains"] for r in results] == [["ai.onnx"]] * 3 + [["mynamespace"]]
    assert [r["kernel"] for r in results] == [False, False, False, True]
    assert all(r["max_abs_diff"] < 1e-5 for r in results), results
