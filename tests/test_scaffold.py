"""`onnxdoctor scaffold`: the golden reference package, bad input, writing rules, the expression compiler."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pytest
from typer.testing import CliRunner

from onnxdoctor.cli import app
from onnxdoctor.errors import UsageError
from onnxdoctor.scaffold import expr as E
from onnxdoctor.scaffold.generate import build_spec, render_package

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "kernels" / "myselu"
# Build outputs and fetched headers live beside the golden sources but are ignored by git.
IGNORED = {"build", ".ort_headers", "__pycache__", ".pytest_cache"}


def scaffold(*args: str) -> "object":
    """Invoke the real CLI in-process; stderr is kept apart from stdout."""
    return CliRunner().invoke(app, ["scaffold", *args])


def tree(folder: Path) -> Dict[str, bytes]:
    """Relative path -> bytes for every file, skipping ignored build folders."""
    files: Dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not (set(path.relative_to(folder).parts) & IGNORED):
            files[str(path.relative_to(folder))] = path.read_bytes()
    return files


def test_scaffold_myselu_reproduces_kernels_myselu_byte_for_byte(tmp_path: Path) -> None:
    result = scaffold("MYSELU", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    generated, golden = tree(tmp_path / "myselu"), tree(GOLDEN)
    assert sorted(generated) == sorted(golden)
    for name in golden:
        assert generated[name] == golden[name], f"kernels/myselu/{name} differs from `scaffold MYSELU`"
    for script in ("build.sh", "fetch_ort_headers.sh"):
        assert os.access(tmp_path / "myselu" / script, os.X_OK)


def test_generated_python_compiles_and_has_no_unfilled_placeholders(tmp_path: Path) -> None:
    spec = build_spec("FANCY", expression="x * tanh(softplus(y)) + alpha * max(x, y) ** 2 - k * abs(x)",
                      attrs=["alpha:float=0.5", "k:int=2"], inputs="x,y")
    for name, text in render_package(spec).items():
        if name.endswith(".py"):
            compile(text, name, "exec")
        if not name.endswith(".sh"):  # shell scripts use ${...} themselves
            assert "${" not in text, name


def test_no_math_package_marks_the_math_missing_and_never_passes_silently() -> None:
    files = render_package(build_spec("MYOP"))
    assert "MATH_IS_WRITTEN = False" in files["myop_op.py"]
    assert "xfail(\n    not myop_op.MATH_IS_WRITTEN" in files["test_myop.py"]
    for name in ("myop_op.py", "myop_ort.py", "myop_kernel.h", "myop_cuda.cu", "myop_onnx.py"):
        assert "WRITE THE MATH" in files[name], name
    assert "MATH_IS_WRITTEN = True" in render_package(build_spec("MYSELU"))["myselu_op.py"]


def test_dry_run_lists_files_and_writes_nothing(tmp_path: Path) -> None:
    result = scaffold("MYGELU", "--expr", "x * sigmoid(1.702 * x)", "--out", str(tmp_path), "--dry-run")
    assert result.exit_code == 0
    assert str(tmp_path / "mygelu" / "mygelu_ort_op.cc") in result.stdout.splitlines()
    assert list(tmp_path.iterdir()) == []


def test_existing_files_are_never_overwritten_without_force(tmp_path: Path) -> None:
    target = tmp_path / "myselu"
    target.mkdir()
    (target / "myselu_op.py").write_text("mine")
    result = scaffold("MYSELU", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "--force" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert (target / "myselu_op.py").read_text() == "mine"
    assert sorted(p.name for p in target.iterdir()) == ["myselu_op.py"]
    assert scaffold("MYSELU", "--out", str(tmp_path), "--force").exit_code == 0
    assert (target / "myselu_op.py").read_bytes() == (GOLDEN / "myselu_op.py").read_bytes()


BAD_ARGS: List[List[str]] = [
    ["../evil"], [""], ["has space"], ["class"], ["A" * 300], ["MYSÉLU"], ["1abc"], ["_hidden"], ["a/b"],
    ["MYOP", "--namespace", "aten"], ["MYOP", "--namespace", "my.ns"], ["MYOP", "--namespace", "../x"],
    ["MYOP", "--opset", "11"], ["MYOP", "--opset", "99"],
    ["MYOP", "--expr", "x +"], ["MYOP", "--expr", "y * x"], ["MYOP", "--expr", "x[0]"],
    ["MYOP", "--expr", "x.sum()"], ["MYOP", "--expr", "sum(x)"], ["MYOP", "--expr", "torch.exp(x)"],
    ["MYOP", "--expr", "x if x else 1"], ["MYOP", "--expr", "x @ x"], ["MYOP", "--expr", "x < 1"],
    ["MYOP", "--expr", "'s' * x"], ["MYOP", "--expr", "beta * 2", "--attr", "beta:float=1"],
    ["MYOP", "--expr", "exp(x, x)"], ["MYOP", "--expr", "__import__('os')"], ["MYOP", "--expr", ""],
    ["MYOP", "--expr", "x // 2"], ["MYOP", "--expr", "x\n+1"], ["MYOP", "--expr", "exp(" * 300 + "x" + ")" * 300],
    ["MYOP", "--attr", "beta:str=1"], ["MYOP", "--attr", "beta:float=abc"], ["MYOP", "--attr", "1beta:float=1"],
    ["MYOP", "--attr", "beta:float=nan"], ["MYOP", "--attr", "torch:float=1"],
    ["MYOP", "--inputs", "x,,y"], ["MYOP", "--inputs", "x,x"], ["MYOP", "--inputs", "od_x"],
    ["MYSELU", "--attr", "gamma:float=2"],  # the reference math uses beta
]


@pytest.mark.parametrize("args", BAD_ARGS, ids=lambda a: " ".join(a)[:40])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: List[str]) -> None:
    result = scaffold(*args, "--out", str(tmp_path))
    assert result.exit_code == 2, (args, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnxdoctor: error: "), result.stderr
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_command_imports_no_heavy_library() -> None:
    code = (
        "import sys; import onnxdoctor.cli.scaffold, onnxdoctor.scaffold.generate; "
        "from onnxdoctor.scaffold.generate import build_spec, render_package; "
        "render_package(build_spec('MYSELU')); "
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'onnxscript', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------- expression compiler

_NP_ENV: Dict[str, object] = {
    "np": np, "math": math, "_np_sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "_np_erf": np.vectorize(math.erf),
}


def _numpy_fn(tree: E.Expr) -> Callable[[np.ndarray], np.ndarray]:
    text = E.to_python(tree, "numpy")
    return lambda x: eval(text, dict(_NP_ENV), {"x": x})  # noqa: S307 - our own generated text


@pytest.mark.parametrize("fn", sorted(E.FUNCTIONS))
def test_derivative_rule_matches_finite_differences(fn: str) -> None:
    arity = E.FUNCTIONS[fn].arity
    offset = 2.0 if fn in ("log", "sqrt") else 0.2  # stay inside their domain
    text = f"{fn}(0.7 * x + {offset})" if arity == 1 else f"{fn}(x, 0.3 - 0.5 * x)"
    tree = E.parse_expression(text, ["x"], [])
    f, df = _numpy_fn(tree), _numpy_fn(E.derivative(tree, "x"))
    # Points away from kinks (relu, abs, floor, min/max switch-overs) where no derivative exists.
    x = np.array([-1.37, -0.61, 0.43, 0.91, 1.73])
    h = 1e-6
    numeric = (f(x + h) - f(x - h)) / (2 * h)
    np.testing.assert_allclose(np.broadcast_to(df(x), x.shape), numeric, rtol=1e-5, atol=1e-6)


def test_printers_keep_precedence() -> None:
    tree = E.parse_expression("-(x - (beta - x)) / (x * 2) ** -x", ["x"], ["beta"])
    x, beta = 0.8, 1.3
    expected = -(x - (beta - x)) / (x * 2) ** -x
    assert math.isclose(eval(E.to_python(tree, "numpy"), {"np": np}, {"x": x, "beta": beta}), expected)
    cxx = E.to_cxx(tree, lambda n: n.text)
    assert "od_pow(x * 2, -x)" in cxx and "--" not in cxx


def test_unknown_names_are_named_in_the_error() -> None:
    with pytest.raises(UsageError, match="unknown name 'gamma'"):
        E.parse_expression("x * gamma", ["x"], ["beta"])
    with pytest.raises(UsageError, match="unknown function 'softmax'"):
        E.parse_expression("softmax(x)", ["x"], [])


def test_scaffold_invocation_round_trips_through_the_cli(tmp_path: Path) -> None:
    from onnxdoctor.scaffold import REFERENCE_PACKAGE, scaffold_invocation

    assert (REPO / REFERENCE_PACKAGE / "myselu_ort_op.cc").is_file()
    line = scaffold_invocation("MYGELU", "acme", ("x", "y"), {"beta": ("float", 1.0), "k": ("int", 2)}, "x * sigmoid(beta * y) + k")
    assert line == "onnxdoctor scaffold MYGELU --namespace acme --expr 'x * sigmoid(beta * y) + k' --attr beta:float=1.0 --attr k:int=2 --inputs x,y"
    import shlex

    result = scaffold(*shlex.split(line)[2:], "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "scaffold MYGELU --namespace acme" in (tmp_path / "mygelu" / "README.md").read_text()
