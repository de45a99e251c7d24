"""What a new user hit on first contact (issue 23): the ASCII locale, `--json` on refusals, and the
small cuts in the commands' own words. Each test runs the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onnxdoctor", *args],
        check=False, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


# ---- the ASCII locale ---------------------------------------------------------------------------

# An ASCII-only terminal; PYTHONIOENCODING set but empty means "the locale's encoding" to Python.
ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
                "PYTHONIOENCODING": ""}


@pytest.mark.slow
def test_a_healthy_model_is_healthy_in_an_ascii_locale() -> None:
    # torch prints "... ✅" to the worker's stdout during the dynamo export.
    result = _cli("diagnose", str(FIXTURES / "healthy/mlp.py"), "--exporter", "dynamo", "--no-fix",
                  env=ASCII_LOCALE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OD299" not in result.stdout and "UnicodeEncodeError" not in result.stdout
    assert "healthy" in result.stdout
    result.stdout.encode("ascii")  # the parent printed only what the terminal can show


# ---- --json: one JSON object on stdout, whatever happens ----------------------------------------


def _one_json_object(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    document = json.loads(result.stdout)  # raises on an empty stdout or on two documents
    assert isinstance(document, dict)
    assert "Traceback" not in result.stdout + result.stderr
    return document


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["diagnose", "nope.py"], "usage", "no such file"),
        (["diagnose", "fixtures/healthy/mlp.py", "--timeout", "-1"], "usage", "--timeout"),
        (["diagnose", "fixtures/healthy/mlp.py", "--opset", "x"], "usage", "--opset"),
        (["diagnose", "fixtures/healthy/mlp.py", "--no-such-flag"], "usage", "--no-such-flag"),
        (["diagnose"], "usage", "TARGET"),
        (["diagnose", "fixtures/healthy/mlp.py", "--report", "README.md"], "refused-write", "--force"),
        (["codes", "--no-such-flag"], "usage", "--no-such-flag"),
        (["env", "--no-such-flag"], "usage", "--no-such-flag"),
    ],
)
def test_json_usage_errors_and_refusals_are_one_json_object(args: list[str], code: str, words: str) -> None:
    result = _cli(*args, "--json", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    document = _one_json_object(result)
    error = document["error"]
    assert isinstance(error, dict) and error["code"] == code and words in str(error["message"])
    assert words in result.stderr  # the line for a person is still on stderr


def test_json_names_an_output_refused_after_the_run(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    script = tmp_path / "late.py"
    # The report appears while the run goes on: writing it at the end is refused without --force.
    script.write_text(f"open({str(report)!r}, 'w').write('mine')\n")
    result = _cli("diagnose", str(script), "--report", str(report), "--json", "--no-fix", timeout=120)
    assert result.returncode == 2, result.stderr
    document = _one_json_object(result)
    assert document["findings"], document  # the diagnosis is there (the script builds no model)
    error = document["error"]
    assert isinstance(error, dict) and error["code"] == "output-not-written" and "--force" in str(error["message"])
    assert report.read_text() == "mine"


# ---- scaffold: the printed instructions work as printed -----------------------------------------


def _third_party_imports(folder: Path) -> set[str]:
    import ast

    local = {path.stem for path in folder.glob("*.py")}
    names: set[str] = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return {name for name in names - local - {"__future__"} if name not in sys.stdlib_module_names}


def test_the_scaffolded_package_needs_only_what_the_quick_start_installs() -> None:
    import importlib.metadata
    import re

    # pyproject's `dependencies = [...]` (tomllib is 3.11+; the project supports 3.10).
    block = re.search(r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text("utf-8"),
                      re.MULTILINE | re.DOTALL)
    assert block is not None
    installed = {re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0].lower().replace("_", "-")
                 for dep in re.findall(r'^\s*"([^"]+)"', block.group(1), re.MULTILINE)}
    distributions = importlib.metadata.packages_distributions()
    needed = {dist.lower().replace("_", "-") for module in _third_party_imports(ROOT / "kernels/myselu")
              for dist in distributions.get(module, [module])}
    assert "pytest" in needed  # the parity test's runner
    assert needed <= installed, f"the package imports {sorted(needed - installed)}, not in the install"


def test_scaffold_prints_the_test_command_its_readme_gives(tmp_path: Path) -> None:
    # tests/test_scaffold_packages.py runs the README's command in a scaffolded package; the line
    # the command prints must be that same command.
    import re

    result = _cli("scaffold", "MYSELU", "--out", str(tmp_path), timeout=60)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("test:"))
    readme = (tmp_path / "myselu/README.md").read_text("utf-8")
    match = re.search(r"## Test\s+```bash\n(.+?)\n```", readme)
    assert match is not None
    assert line == f"test: cd {tmp_path / 'myselu'} && {match.group(1)}"
    assert match.group(1).endswith("python test_myselu.py")  # no pytest command to install first
    assert 'if __name__ == "__main__":' in (tmp_path / "myselu/test_myselu.py").read_text("utf-8")


# ---- explain, codes, --help ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["203", "od203", "OD203", "unregistered-custom-op"])
def test_explain_takes_a_code_by_its_number_too(name: str) -> None:
    result = _cli("explain", name, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# OD203 unregistered-custom-op")


def test_codes_names_the_0xx_group_environment_as_the_readme_does() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "0 environment" in readme
    rows = [line.split() for line in _cli("codes", timeout=60).stdout.splitlines()]
    groups = {row[0]: row[2] for row in rows if row}
    assert groups["OD001"] == groups["OD099"] == "environment"
    assert groups["OD999"] == "tool" and groups["OD203"] == "export"
    listed = json.loads(_cli("codes", "--json", timeout=60).stdout)["codes"]
    assert {row["code"]: row["group"] for row in listed}["OD003"] == "environment"


def test_top_level_help_lists_diagnose_first() -> None:
    lines = _cli("--help", timeout=60).stdout.splitlines()
    commands = [line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.strip()]
    assert commands[0] == "diagnose", commands


# ---- fixes that read like the user's own code ---------------------------------------------------


@pytest.mark.slow
def test_the_tensor_outputs_wrapper_names_the_onnx_outputs_after_the_fields(tmp_path: Path) -> None:
    # The fix's own code, applied as the worker and fix.py apply it, then a real dynamo export with
    # the settings it leaves (the worker's EXPORT stage passes output_names the same way).
    import onnx
    import torch

    from onnxdoctor.analysis.fixes.outputs import WRAPPER
    from onnxdoctor.worker.fixkit import apply_load_code
    from onnxdoctor.worker.loader import load_script

    loaded = load_script(FIXTURES / "corpus/dataclass_output_pytorch_106160.py", None)  # (scores, boxes)
    apply_load_code(WRAPPER, loaded, "load_tensor_outputs", tmp_path)
    assert loaded.settings["output_names"] == ["scores", "boxes"]
    path = tmp_path / "model.onnx"
    torch.onnx.export(loaded.model, loaded.args, str(path), dynamo=True,
                      output_names=loaded.settings["output_names"])
    assert [output.name for output in onnx.load(str(path)).graph.output] == ["scores", "boxes"]


TRAINING_SCRIPTS = {
    "module": "model = Net()\nexample_inputs = (torch.randn(2, 4),)\n",
    "pair": "def make_net():\n    return Net(), (torch.randn(2, 4),)\n",
    "triple": "def get_model():\n    return Net(), (torch.randn(2, 4),), {}\n",
    "get_inputs": "def get_model():\n    return Net()\n\n\ndef get_inputs():\n    return (torch.randn(2, 4),)\n",
}


@pytest.mark.parametrize("form", list(TRAINING_SCRIPTS))
def test_the_training_mode_snippet_builds_the_model_the_scripts_own_way(tmp_path: Path, form: str) -> None:
    import ast

    from onnxdoctor.analysis.fixes import eval_mode
    from onnxdoctor.analysis.fixes._context import FixContext
    from onnxdoctor.model import Finding, Severity, Stage, StageOutcome, Status
    from onnxdoctor.worker.loader import load_script

    script = tmp_path / "net.py"
    script.write_text("import torch\n\n\nclass Net(torch.nn.Sequential):\n    def __init__(self):\n"
                      "        super().__init__(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))\n\n\n"
                      + TRAINING_SCRIPTS[form])
    loaded = load_script(script, "make_net" if form == "pair" else None)  # the worker's own loader
    assert loaded.form == form
    facts = {"factory": loaded.factory, "factory_form": loaded.form, "training": True,
             "mode_sensitive_modules": ["1"]}
    finding = Finding("OD601", Stage.PARITY, Severity.ERROR, "outputs differ")
    context = FixContext.build(finding, {"outcomes": [StageOutcome(Stage.LOAD, Status.PASSED, facts=facts)]})
    (fix,) = eval_mode.propose(finding, context)
    # Every name the snippet reads before assigning it is one the script defines (or torch).
    assigned: set[str] = set()
    for statement in ast.parse(fix.snippet).body:
        read = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        missing = read - assigned - set(loaded.namespace) - {"torch"}
        assert not missing, f"the snippet calls {missing}, which {script.name} does not define:\n{fix.snippet}"
        assigned |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if form != "module":
        assert f"{loaded.factory}()" in fix.snippet


# ---- env at 80 columns --------------------------------------------------------------------------


def test_env_wraps_long_paths_at_80_columns_instead_of_cutting_them() -> None:
    import io

    from rich.console import Console

    from onnxdoctor.envinfo import collect_env
    from onnxdoctor.render.env import render_env

    facts = collect_env()
    out = io.StringIO()
    render_env(facts, Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "…" not in text
    squashed = "".join(text.split())
    paths = [tool["path"] for tool in facts["tools"].values() if tool.get("found") and tool.get("path")]
    assert paths, facts["tools"]
    for path in paths:
        assert "".join(path.split()) in squashed, f"{path} is not shown whole:\n{text}"


# ---- the README shows what a run prints ---------------------------------------------------------


def _normalised_session(text: str) -> list[str]:
    """Times and the last digits of measured differences vary from run to run; the rest may not."""
    import re

    lines = []
    for line in text.rstrip("\n").splitlines():
        line = re.sub(r"\s+\d+\.\d+s(?=\s+(passed|failed|crashed|timed_out))", " T", line)
        line = re.sub(r"max abs diff [0-9.e+-]+, [0-9.]+s", "max abs diff D, T", line)
        lines.append(line.rstrip())
    return lines


@pytest.mark.slow
def test_the_readme_s_real_session_is_what_the_command_prints() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    block = readme.split("## A real session", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    command, _, shown = block.partition("\n")
    assert command == "$ onnxdoctor diagnose fixtures/export/od203_custom_op_myselu.py"
    result = _cli(*command.split()[2:], timeout=600)
    assert result.returncode == 1, result.stderr
    assert _normalised_session(result.stdout) == _normalised_session(shown)
    # The same run is the suite's check that the best fix is ranked first and that verification
    # stops at the first fix that works: the later ones stay "not tried".
    assert "   1. verified ✓ (parity" in shown and "   2. not tried" in shown


# ---- one copy: what a recipe's steps mean lives in recipe.py ------------------------------------


def test_a_recipe_says_where_it_acts_and_whether_it_is_tied_to_an_exporter() -> None:
    from onnxdoctor.recipe import (
        EvalMode,
        ExportCode,
        LoadCode,
        Recipe,
        RewriteOnnx,
        RuntimeKernels,
        SetOpset,
        UseExporter,
        UseOpset,
    )

    assert Recipe("eval", (EvalMode(),)).acts_on == 0
    assert Recipe("wrap", (LoadCode("model = model"), UseOpset(18))).acts_on == 0
    assert Recipe("opset", (UseOpset(18),)).acts_on == 1 and Recipe("none").acts_on == 1
    assert Recipe("rewrite", (UseOpset(18), RewriteOnnx(SetOpset(18)))).acts_on == 2
    assert Recipe("kernels", (RuntimeKernels(extensions=True),)).acts_on == 3
    assert Recipe("code", (ExportCode("x = 1"),)).exporter_bound
    assert not Recipe("exporter", (UseExporter("torchscript"), UseOpset(17))).exporter_bound


def test_fix_py_writes_every_kind_of_step(tmp_path: Path) -> None:
    from onnxdoctor.analysis.fixes.program import fix_program
    from onnxdoctor.model import Applicability, Fix
    from onnxdoctor.recipe import (
        CustomOpsets,
        EvalMode,
        ExportCode,
        LoadCode,
        Recipe,
        RewriteOnnx,
        RuntimeKernels,
        SetOpset,
        UseExporter,
        UseOpset,
    )

    recipe = Recipe("all", (EvalMode(), LoadCode("model = model"), UseExporter("torchscript"), UseOpset(17),
                            ExportCode("table = {}", translation_table="table"), CustomOpsets((("my", 1),)),
                            RewriteOnnx(SetOpset(17)), RuntimeKernels(extensions=True)))
    fix = Fix(kind="all", title="every step", snippet="pass\n", applicability=Applicability.SAFE, recipe=recipe)
    text = fix_program(fix, str(tmp_path / "model.py"), None, "script")
    compile(text, "fix.py", "exec")
    for expected in ("loaded.model.eval()", "fixkit.apply_load_code(", "dynamo=False", "opset_version=17",
                     "custom_translation_table=names['table']", "custom_opsets={'my': 1}",
                     "fixkit.rewrite_file(OUTPUT, [RewriteOnnx(", "extensions=True"):
        assert expected in text, expected
