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
        capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout, cwd=cwd,
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
