"""General mechanisms for failures not seen before (issue 22), written after the forty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-06.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose

_ARRAY_INPUT = '''
import numpy as np
import torch

dynamo = False


def get_model():
    torch.manual_seed(0)
    features = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    ids = np.array([[1, 2]])  # int64, in a list beside the tuple the first array is in
    return Model().eval(), ((features,), [ids])


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.embedding = torch.nn.Embedding(4, 2)

    def forward(self, first, second):
        (features,), (ids,) = first, second
        return torch.tanh(self.linear(features)) + self.embedding(ids).sum(1)
'''


@pytest.mark.slow
def test_numpy_example_inputs_are_made_tensors_and_the_export_checked(tmp_path: Path) -> None:
    # DeepCTR-Torch#83: a NumPy array handed to torch.onnx.export as the example input.
    script = tmp_path / "arrays.py"
    script.write_text(_ARRAY_INPUT, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD107" and finding.stage is Stage.LOAD
    fix = finding.fixes[0]
    assert fix.kind == "array_inputs" and fix.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "[1][0][0]" in fix.title and "[1][1][0]" in fix.title  # both arrays, nested where they are


def test_fix_checks_keep_the_rank_order_isolated_fixes_included() -> None:
    # DAT's frozen window mask (chaiNNer#2715): two exporter switches (in-process checks, about
    # 90 s each) were checked before the branch read one way (isolated, ranked first, 5 s) and
    # spent the --fix-budget; the branch was never tried.
    from onnxdoctor.model import Applicability, Fix
    from onnxdoctor.pipeline import _segments
    from onnxdoctor.recipe import LoadCode, Recipe, UseExporter

    def fix(kind: str, isolated: bool) -> Fix:
        recipe = Recipe(kind, (LoadCode(f"# {kind}"),) if isolated else (UseExporter(kind),), isolated=isolated)
        return Fix(kind=kind, title=kind, snippet="", applicability=Applicability.SAFE, cost="", recipe=recipe)

    ranked = list(enumerate([fix("true", True), fix("false", True), fix("dynamo", False), fix("strict", False),
                             fix("script", True), fix("torchscript", False)]))
    assert [(isolated, [f.kind for _, f in batch]) for isolated, batch in _segments(ranked)] == [
        (True, ["true"]), (True, ["false"]), (False, ["dynamo", "strict"]), (True, ["script"]),
        (False, ["torchscript"])]
