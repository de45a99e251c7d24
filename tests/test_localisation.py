"""A mismatch in a TorchScript export is localised to the first submodule whose output differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.parity import scope_names

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_torchscript_scopes_map_to_module_names() -> None:
    # A Sequential's child repeats its parent's name; a ModuleList item (never called) does not.
    assert scope_names(["layers", "layers.2", "act"]) == ["layers", "layers.2", "layers.2.act"]
    assert scope_names(["layers.0", "lin"]) == ["layers.0", "layers.0.lin"]
    assert scope_names(["encoder", "encoder.layer.0", "attention", "self"]) == [
        "encoder", "encoder.layer.0", "encoder.layer.0.attention", "encoder.layer.0.attention.self"]
    assert scope_names([]) == []


@pytest.mark.slow
def test_the_first_diverging_submodule_is_named_with_its_node_and_line() -> None:
    fixture = FIXTURES / "parity" / "od601_symbolic_wrong_math_in_block.py"
    (diagnosis,) = diagnose(str(fixture), DiagnoseOptions(fix=False))
    [finding] = [f for f in diagnosis.findings if f.code == "OD601"]
    # Block 0 (ReLU) matches; block 1's act, the wrong symbolic's HardSwish, is the first to differ.
    assert finding.node == "/layers/layers.1/act/HardSwish" and finding.op == "HardSwish"
    assert "module 'layers.1.act' (Act)" in finding.message
    line = int((finding.source or ":0").rsplit(":", 1)[1])
    assert finding.source.startswith("od601_symbolic_wrong_math_in_block.py:")  # type: ignore[union-attr]
    # The user's line that calls the op whose symbolic wrote the node.
    assert "myselu(" in fixture.read_text().splitlines()[line - 1]


@pytest.mark.slow
def test_a_zero_budget_skips_the_search_and_says_so() -> None:
    fixture = FIXTURES / "parity" / "od601_symbolic_wrong_math_in_block.py"
    (diagnosis,) = diagnose(str(fixture), DiagnoseOptions(fix=False, localize_budget=0))
    [finding] = [f for f in diagnosis.findings if f.code == "OD601"]
    assert finding.node is None and "--localize-budget of 0 s" in finding.message
