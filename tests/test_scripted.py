"""A ScriptModule model (issue 22 §4b): the routes around exporting it, each verified end to end."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCRIPTED = FIXTURES / "export/od204_script_module.py"


def test_script_module_facts_name_the_eager_class_and_the_arguments_left_out() -> None:
    from onnxdoctor.worker.loader import LoadedModel
    from onnxdoctor.worker.scripted import script_module_facts

    namespace = runpy.run_path(str(SCRIPTED))
    model, args = namespace["get_model"]()
    facts = script_module_facts(model, LoadedModel(model, args, {}, namespace=namespace))["script_module"]
    assert facts["original_name"] == "MaskedPool" and facts["eager_class"] == "MaskedPool"
    assert [a["name"] for a in facts["arguments"]] == ["x", "mask"] and facts["positional_inputs"] == 1
    eager = namespace["MaskedPool"]()
    assert script_module_facts(eager, LoadedModel(eager, args, {}, namespace=namespace)) == {}


@pytest.mark.slow
def test_a_script_module_gets_verified_routes_and_honest_failures() -> None:
    diagnosis = diagnose(str(SCRIPTED), DiagnoseOptions(fix=True, all_fixes=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD204" and "ScriptModule" in finding.message
    fixes = {fix.kind: fix for fix in finding.fixes}
    assert "control_flow" not in fixes  # no data-dependent branch to rewrite
    for kind in ("scripted_eager", "scripted_wrapper"):
        assert fixes[kind].verified is True, fixes[kind].check
        assert fixes[kind].check.max_abs_diff < 1e-5  # type: ignore[union-attr]
    # The converter cannot take the optional argument, and neither can the TorchScript exporter.
    assert fixes["scripted_converter"].verified is False
    assert fixes["exporter"].verified is False and "None's" in fixes["exporter"].check.detail  # type: ignore[union-attr]
