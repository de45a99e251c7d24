"""Only symbolics registered by the user's own files count as theirs (libraries register some too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REGISTER = """
import torch
def {name}(g, x):
    return g.op("Relu", x)
torch.onnx.register_custom_op_symbolic("{op}", {name}, 17)
"""


def test_symbolics_from_library_files_are_not_the_users(tmp_path: Path) -> None:
    project, library = tmp_path / "project", tmp_path / "site" / "somelib"
    project.mkdir()
    library.mkdir(parents=True)
    (project / "mine.py").write_text(REGISTER.format(name="my_symbolic", op="myns::myop"))
    (library / "__init__.py").write_text(REGISTER.format(name="lib_symbolic", op="libns::nms"))
    probe = (
        "import json, sys\n"
        f"sys.path[:0] = [{str(project)!r}, {str(library.parent)!r}]\n"
        "import torch\n"
        "torch.library.define('myns::myop', '(Tensor x) -> Tensor')\n"
        "torch.library.define('libns::nms', '(Tensor x) -> Tensor')\n"
        "import mine, somelib\n"
        "from pathlib import Path\n"
        "from onnxdoctor.worker.tracebacks import find_custom_symbolics\n"
        f"print(json.dumps(find_custom_symbolics(Path({str(project)!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"myns::myop": "my_symbolic"}
