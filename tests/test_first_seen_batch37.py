"""General mechanisms for failures not seen before (issue 22), written after the thirty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-05zb.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


def _first(tmp_path: Path, source: str, **options: object) -> object:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, **options))
    return diagnosis.findings[0]


# huggingface/transformers#43631's shape: a Student-T head's log-likelihood. The distribution's
# argument checks stop torch.export; without them the dynamo exporter meets lgamma, which the
# library rewrites (the TorchScript exporter has no lgamma either).
STUDENT_T = '''
import torch
import torch.nn.functional as F
dynamo = True
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 2)
    def forward(self, x, y):
        loc, raw = self.head(x).unbind(-1)
        return torch.distributions.StudentT(3.0, loc, F.softplus(raw) + 1e-3).log_prob(y)
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(5, 4), torch.randn(5))
'''


@pytest.mark.slow
def test_distribution_checks_are_left_out_and_chained_with_the_rewrite_they_uncover(tmp_path: Path) -> None:
    finding = _first(tmp_path, STUDENT_T)
    assert finding.code == "OD204", finding.message
    best = finding.fixes[0]
    assert best.verified and best.steps == ("distribution_checks", "rewrite"), \
        [(f.title, f.steps, f.verified) for f in finding.fixes]


def _refused_at_other_inputs(declared: list[dict]) -> list:
    from onnxdoctor.analysis.classify import classify
    from onnxdoctor.model import Stage, StageOutcome, Status

    second = {"matched": False, "source": "the script's get_inputs2()", "shapes": {"x": [1, 4, 12, 16]},
              "message": "Got invalid dimensions for input: x for the following indices\n index: 2 Got: 12 Expected: 8",
              "fixed": [["x", 2, 12, 8]]}
    passed = [StageOutcome(s, Status.PASSED) for s in (Stage.LOAD, Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN)]
    return classify([*passed, StageOutcome(Stage.EXPORT, Status.PASSED, facts={"exporter": "dynamo"}),
                     StageOutcome(Stage.PARITY, Status.PASSED, facts={"second_inputs": second}),
                     StageOutcome(Stage.SHAPES, Status.PASSED, facts={"declared": declared})])


def test_a_size_refused_at_other_inputs_is_undeclared_only_when_nothing_declared_it() -> None:
    # ComfyUI#5490's Flux ids: the script declares height dynamic and the dynamo exporter
    # specialises it (the SHAPES stage's OD804 says so); "nothing declared it" would be wrong.
    undeclared = [f for f in _refused_at_other_inputs([]) if "nothing declared" in f.message]
    assert [f.code for f in undeclared] == ["OD802"]
    declared = _refused_at_other_inputs([{"input": "x", "dim": 2, "name": "height", "min": None, "max": None}])
    assert not [f for f in declared if "nothing declared" in f.message], [f.message for f in declared]


def test_a_graph_that_reads_no_input_says_its_outputs_are_constants() -> None:
    # facebookresearch/detr#49: the padding copy_ the tracer dropped cut the image off the graph.
    # The failure's own finding stays first: it names the cause where one is found (the write the
    # exporter dropped, a frozen value); the dropped inputs are what follows from it.
    from onnxdoctor.analysis.classify import classify
    from onnxdoctor.model import ErrorInfo, Stage, StageOutcome, Status

    mismatch = ErrorInfo(type="onnxdoctor.worker.tracebacks.StageFailed", message="output 0 differs: max abs error inf",
                         chain=("onnxdoctor.worker.tracebacks.StageFailed",))
    found = classify([
        StageOutcome(Stage.LOAD, Status.PASSED, facts={"settings": {"input_names": ["samples"]}}),
        StageOutcome(Stage.EXPORT, Status.PASSED, facts={"exporter": "torchscript"}),
        StageOutcome(Stage.CHECK, Status.PASSED), StageOutcome(Stage.ORT_LOAD, Status.PASSED),
        StageOutcome(Stage.ORT_RUN, Status.PASSED, facts={"model_inputs": [], "example_tensors": 1}),
        StageOutcome(Stage.PARITY, Status.FAILED, error=mismatch, facts={"code": "OD601"}),
    ])
    assert [f.code for f in found][:2] == ["OD601", "OD502"], [(f.code, f.message) for f in found]
    assert "takes no inputs: the exporter dropped every input (samples)" in found[1].message
