"""General mechanisms for failures not seen before (issue 22), written after the fifty-third
first-seen batch (fixtures/corpus/first_seen_2026-12-06m.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.analysis.classify import extract_op
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# pytorch/pytorch#48930: a post-processing Function whose forward returns several tensors and whose
# symbolic returns one node's single output (TensorRT's BatchedNMS_TRT without outputs=4).
SHORT_SYMBOLIC = '''
import torch
dynamo = False

class TopTwo(torch.autograd.Function):
    @staticmethod
    def symbolic(g, scores):
        return g.op("TRT::TopTwo_TRT", scores)

    @staticmethod
    def forward(ctx, scores):
        values, indices = scores.topk(2, dim=-1)
        return values, indices

class Head(torch.nn.Module):
    def forward(self, x):
        values, indices = TopTwo.apply(x.softmax(-1))
        return values, indices

def get_model():
    return Head(), (torch.randn(3, 5),)
'''


def test_a_traced_op_returning_a_python_number_is_named() -> None:
    text = "RuntimeError: unsupported output type: int, from operator: xformers::efficient_attention_forward_cutlass"
    assert extract_op(text) == "xformers::efficient_attention_forward_cutlass"


@pytest.mark.slow
def test_a_function_symbolic_with_too_few_outputs_is_od205_at_its_def(tmp_path: Path) -> None:
    script = tmp_path / "head.py"
    script.write_text(SHORT_SYMBOLIC)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    line = SHORT_SYMBOLIC.splitlines().index("    def symbolic(g, scores):") + 1
    assert (finding.code, finding.op, finding.source) == ("OD205", "TopTwo", f"head.py:{line}"), finding
    assert "returns 1 value(s) where TopTwo.forward returns 2: write g.op(..., outputs=2)" in finding.message
    best = finding.fixes[0]
    assert best.kind == "function_forward" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


# IDEA-Research/GroundingDINO#46: `special_tokens_mask |= input_ids == t`, and a row written through
# an augmented subscript, with a second name for the mask that must see both.
AUGMENTED_OR = '''
import torch
dynamo = False

class Mask(torch.nn.Module):
    def forward(self, ids):
        mask = torch.zeros_like(ids, dtype=torch.bool)
        seen = mask
        for token in (101, 102):
            mask |= ids == token
        mask[:, 0] |= ids[:, -1] > 50
        return seen.to(torch.int64), ids * 2

def get_model():
    return Mask(), (torch.tensor([[101, 7, 102, 60], [5, 101, 9, 3]]),)
'''


@pytest.mark.slow
def test_an_augmented_bitwise_or_is_exported_as_a_copy_of_the_or(tmp_path: Path) -> None:
    script = tmp_path / "mask.py"
    script.write_text(AUGMENTED_OR)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::__ior_"), finding
    best = finding.fixes[0]
    assert best.kind == "inplace_operator" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


# pytorch/pytorch#106850: a scripted model exported with the TorchScript exporter, whose op the
# TorchScript symbolics refuse and the dynamo exporter maps; the eager class may take the latter.
SCRIPTED_STFT = '''
import torch
dynamo = False
opset_version = 17

class Spectrum(torch.nn.Module):
    def forward(self, x):
        spec = torch.stft(x, n_fft=16, hop_length=4, window=torch.hann_window(16), return_complex=True)
        return spec.abs()

def get_model():
    return torch.jit.script(Spectrum()), (torch.randn(2, 64),)
'''


@pytest.mark.slow
def test_a_scripted_model_is_offered_its_eager_class_with_the_dynamo_exporter(tmp_path: Path) -> None:
    script = tmp_path / "flags.py"
    script.write_text(SCRIPTED_STFT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, all_fixes=True))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::stft"), finding
    eager = [f for f in finding.fixes if f.kind == "scripted_eager"]
    assert {f.verified for f in eager} == {True, False}, [(f.title, f.check) for f in eager]
    assert "dynamo=True" in next(f for f in eager if f.verified).snippet
