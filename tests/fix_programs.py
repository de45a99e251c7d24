"""Run a verified fix the way `--write-fix` hands it to the user: fix.py, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from onnxdoctor.analysis.fixes.program import fix_program
from onnxdoctor.model import Fix

ROOT = Path(__file__).resolve().parent.parent


def run_fix_program(fix: Fix, target: Path, folder: Path, *, factory: str | None = None) -> str:
    """Write fix.py for `fix` into `folder`, run it from another folder, and return what it printed.

    The program must write a model that loads in ONNX Runtime and, for a script, matches PyTorch
    (fix.py checks that itself and exits non-zero otherwise).
    """
    kind = "onnx" if target.suffix == ".onnx" else "script"
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "fix.py"
    program.write_text(fix_program(fix, str(target.resolve()), factory, kind), "utf-8")
    written = folder / "fixed.onnx"
    done = subprocess.run([sys.executable, str(program), str(written)], capture_output=True, text=True,
                          timeout=600, cwd=folder.parent, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)
    assert done.returncode == 0, (fix.kind, done.stderr[-3000:])
    assert written.is_file()
    expected = "loads and runs in ONNX Runtime" if kind == "onnx" else "matches PyTorch"
    assert expected in done.stdout, done.stdout
    return done.stdout
