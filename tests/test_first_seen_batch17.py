"""General mechanisms for failures not seen before (issue 22), written before and after the
seventeenth first-seen batch (fixtures/corpus/first_seen_2026-12-05g.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_first_seen_batch14 import _diagnosed

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_spectrum_built_with_a_python_complex_number_is_exported_as_pairs() -> None:
    # magnitude * exp(phase * 1j) into istft: TorchScript has no complex numbers at all, and the
    # dynamo exporter lowers neither a product with 1j nor a complex exp.
    (diagnosis,) = diagnose(str(CORPUS / "complex_scalar_1j_phase_istft_mb_istft_vits2_3.py"),
                            DiagnoseOptions(fix=True))
    best = diagnosis.findings[0].fixes[0]
    assert best.verified is True, [(f.title, f.check) for f in diagnosis.findings[0].fixes]
    assert best.title.startswith("Rewrite aten::complex")
    assert best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-4


@pytest.mark.slow
def test_a_loop_over_the_experts_nonzero_found_visits_every_expert() -> None:
    # transformers#38518: torch.export stops at `for expert_idx in expert_hit:` (a count the data decides).
    (diagnosis,) = diagnose(str(CORPUS / "nonzero_expert_hit_loop_mixtral_moe_transformers_38518.py"),
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD204"
    best = finding.fixes[0]
    assert best.kind == "every_candidate" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "input sets" in best.check.detail  # judged at other inputs too, where other experts are hit


# A loop whose body does something for every row: visiting every candidate changes the result.
COUNTING_LOOP = '''
import torch

dynamo = True
opset_version = 18


class Count(torch.nn.Module):
    def forward(self, x):
        out = x.clone()
        for i in (x.sum(-1) > 0).nonzero():
            out = out + 1.0
        return out


def get_model():
    torch.manual_seed(0)
    return Count().eval(), (torch.randn(6, 4),)
'''


@pytest.mark.slow
def test_visiting_every_candidate_is_refused_where_the_body_counts_them(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, COUNTING_LOOP, fix=True)
    fixes = {fix.kind: fix for fix in diagnosis.findings[0].fixes}
    assert fixes["every_candidate"].verified is False
    assert not any(fix.verified for fix in diagnosis.findings[0].fixes)


@pytest.mark.slow
def test_dims_declared_for_a_parameter_torch_export_renames_are_checked_as_declared() -> None:
    # forward(self, I) with dynamic_shapes={"I": {2: Dim("H")}}: the graph's input is named `i`.
    # Matched by name only, the declaration was lost and every dim probed: a false OD802.
    (diagnosis,) = diagnose(str(CORPUS / "healthy_pad_replicate_dynamic_amount_denoiser_dynamo_onnxscript_2539.py"),
                            DiagnoseOptions(fix=False))
    assert diagnosis.healthy, [(f.code, f.message) for f in diagnosis.findings]
    # Only H varied, and every size passed.
    assert {dict(check.inputs)["i"] for check in diagnosis.shapes} >= {(1, 1, 2, 1)}
    assert all(check.status == "passed" for check in diagnosis.shapes)


@pytest.mark.slow
def test_a_function_the_exporter_cannot_inline_names_the_extension_op_its_forward_calls() -> None:
    # NATTEN's autograd.Function calls natten::na2d_qk; torch says so only on stderr.
    (diagnosis,) = diagnose(str(CORPUS / "na2d_natten_custom_op_nat_neighborhood_attention_transformer_74.py"),
                            DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert finding.op == "NeighborhoodAttention2DQKAutogradFunction"
    assert finding.torch_op == "natten::na2d_qk" and "natten::na2d_qk" in finding.message


@pytest.mark.slow
def test_an_fx_quantized_prelu_is_named_and_rebuilt_as_float() -> None:
    # The exporter stops converting the quantized weight's constant: the op it feeds is named, and
    # the float model is rebuilt with a float PReLU (and checked against the quantized one).
    (diagnosis,) = diagnose(str(CORPUS / "prelu_fx_unknown_quantizer_pytorch_101091.py"), DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.op == "quantized::prelu"
    best = finding.fixes[0]
    assert best.verified is True and best.recipe is not None, [(f.title, f.check) for f in finding.fixes]
    assert "float model" in best.title


@pytest.mark.slow
def test_a_sparse_matrix_built_in_forward_is_exported_dense() -> None:
    (diagnosis,) = diagnose(str(CORPUS / "sparse_coo_tensor_edge_index_adjacency_pytorch_112487.py"),
                            DiagnoseOptions(fix=True))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::sparse_coo_tensor")
    best = finding.fixes[0]
    assert best.kind == "dense_sparse" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


# A sparse adjacency held as a buffer, with a duplicate entry (coalescing sums it).
SPARSE_BUFFER = '''
import torch

dynamo = False
opset_version = 17


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        idx = torch.tensor([[0, 1, 1, 2, 3, 3], [1, 0, 2, 1, 3, 3]])
        self.register_buffer("adj", torch.sparse_coo_tensor(idx, torch.ones(6), (4, 4)))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(torch.sparse.mm(self.adj, self.lin(x)))


def get_model():
    torch.manual_seed(0)
    return GCN().eval(), (torch.randn(4, 8),)
'''


@pytest.mark.slow
def test_a_sparse_buffer_is_a_dense_constant_of_the_graph(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, SPARSE_BUFFER, fix=True)
    best = diagnosis.findings[0].fixes[0]
    assert best.kind == "dense_sparse" and best.verified is True
    assert best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-5
