"""The model script runs as a module Python can import again (README, "Model scripts").

torch.compile's frontend (torch.cond's branches) imports the module a function was defined in by
its `__module__` name; runpy.run_path takes its temporary module out of sys.modules when the
script ends, so a model with module-level branch functions failed at its first call.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures/healthy/cond_module_level_branches.py"

_PROBE = textwrap.dedent("""
    import runpy, sys
    from pathlib import Path
    import torch
    from onnxdoctor.worker.loader import RUN_NAME, load_script

    path = Path(sys.argv[1])

    def call(model, args):
        try:
            return model(*args)
        except Exception as exc:
            return f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0]}"

    # First what the loader did before (runpy's module is gone once the script ends) ...
    ns = runpy.run_path(str(path), run_name=RUN_NAME)
    print(call(*ns["get_model"]()) if RUN_NAME not in sys.modules else "still registered")
    # ... then the loader.
    loaded = load_script(path, None)
    model, args, ns = loaded.model, loaded.args, loaded.namespace
    assert sys.modules[RUN_NAME].__dict__ is ns
    assert ns["__name__"] == RUN_NAME and ns["__file__"] == str(path)
    got = call(model, args)
    y = model.proj(*args)
    want = ns["positive_branch"](y) if y.sum() > 0 else ns["negative_branch"](y)
    print(got if isinstance(got, str) else "OK" if torch.equal(got, want) else "WRONG")
""")


def test_cond_with_module_level_branches_runs_after_loading() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(FIXTURE)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.strip().splitlines()[-2:]
    # runpy alone: the failure the loader avoids (so this test fails for the right reason).
    assert "No module named '__onnxdoctor__'" in before, before
    # The fixture's `if __name__ == "__main__"` block raises: loading at all proves it stayed inert.
    assert after == "OK", after


def test_script_is_compiled_without_the_loaders_future_flags(tmp_path: Path) -> None:
    # loader.py has `from __future__ import annotations`; the user's script must not inherit it.
    script = tmp_path / "annotated.py"
    script.write_text(textwrap.dedent("""
        import torch

        def scale(x: torch.Tensor, k: int = 2) -> torch.Tensor:
            return x * k

        class M(torch.nn.Module):
            def forward(self, x):
                return scale(x)

        assert scale.__annotations__["k"] is int, scale.__annotations__
        model, example_inputs = M(), (torch.ones(2),)
    """))
    from onnxdoctor.worker.loader import load_script

    loaded = load_script(script, None)
    assert loaded.namespace["scale"].__annotations__["k"] is int
