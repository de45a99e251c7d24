"""General mechanisms for failures not seen before (issue 22), written after the twenty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-05k.txt and ...l.txt)."""

from __future__ import annotations

from pathlib import Path

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from tests.test_first_seen_batch14 import _diagnosed

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# A branch on a value read out of a tensor: torch.export's guard names a float symbol (zuf0).
ITEM_BRANCH = '''
import torch

dynamo = True
opset_version = 18


class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum().item() > 3:
            return x * 2
        return x


def get_model():
    return Gate().eval(), (torch.ones(5),)
'''


def test_a_data_dependent_guard_names_the_op_whose_result_it_asked_about() -> None:
    # KNNImputer's `min(k, len(potential_donors_idx))` (pytorch#146990): torch says only "u0", at
    # the line with min(); the symbol is nonzero()'s row count, made two lines above.
    (diagnosis,) = diagnose(str(CORPUS / "nonzero_len_topk_k_knn_imputer_torch_export_pytorch_146990.py"),
                            DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD204"
    assert finding.torch_op == "aten::nonzero"
    assert "u0 is the data-dependent result of aten::nonzero at " \
           "nonzero_len_topk_k_knn_imputer_torch_export_pytorch_146990.py:58" in finding.message


def test_a_float_read_out_with_item_is_named_as_item(tmp_path: Path) -> None:
    finding = _diagnosed(tmp_path, ITEM_BRANCH, fix=False).findings[0]
    assert finding.code == "OD204"
    assert finding.torch_op == "aten::item"
    assert "zuf0 is the data-dependent result of aten::item at model.py:10" in finding.message
