"""Real library models built from small configs (random weights, no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fix_programs import run_fix_program

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.slow
def test_a_decoder_returning_its_cache_is_OD211_fixed_by_its_own_switch(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    # Three isolated fix workers, each importing transformers: more than the default --fix-budget
    # on a busy machine.
    options = DiagnoseOptions(all_fixes=True, timeout=900, fix_budget=900)
    (diagnosis,) = diagnose(str(FIXTURES / "export/od211_transformers_cache.py"), options)
    (finding,) = [f for f in diagnosis.findings if f.code == "OD211"]
    assert "DynamicCache" in finding.message and finding.source is None  # not "<string>:1"
    assert not any(f.code == "OD204" for f in diagnosis.findings)  # not data-dependent control flow
    checks = {fix.kind: fix.check for fix in finding.fixes}
    assert checks["use_cache_off"] is not None and checks["use_cache_off"].works
    assert checks["use_cache_off"].max_abs_diff is not None and checks["use_cache_off"].max_abs_diff < 1e-4
    assert checks["tensor_outputs"] is not None and checks["tensor_outputs"].works
    assert finding.fixes[0].kind == "use_cache_off"  # the model's own switch ranks first
    # The route for generation: the cache as tensors, verified by a greedy decode in ONNX Runtime.
    flat = checks["flat_cache"]
    assert flat is not None and flat.works, flat
    assert ("greedy decoding with the exported cache in ONNX Runtime gives eager PyTorch's tokens (prompts of 4 "
            "and 9 tokens, a prefill and 3 decode steps each" in flat.detail), flat.detail
    for fix in finding.fixes:  # the switch and the wrapper, as --write-fix hands them over
        if fix.kind in ("use_cache_off", "tensor_outputs"):  # flat_cache's: tests/test_llm_cache.py
            run_fix_program(fix, FIXTURES / "export/od211_transformers_cache.py", tmp_path / fix.kind)


@pytest.mark.slow
def test_a_train_mode_wrapper_around_an_eval_transformers_model_is_not_OD206() -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    options = DiagnoseOptions(exporter="dynamo", fix=False, timeout=300)
    (diagnosis,) = diagnose(str(FIXTURES / "real/wrapper_train_around_eval_bert.py"), options)
    assert "OD206" not in [f.code for f in diagnosis.findings], [f.message for f in diagnosis.findings]


@pytest.mark.slow
def test_OD206_gives_the_real_number_of_modules_in_training_mode() -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    import torch  # the test process may import torch; the CLI process may not
    from transformers import BertConfig, BertModel

    options = DiagnoseOptions(exporter="dynamo", fix=False, timeout=300)
    (diagnosis,) = diagnose(str(FIXTURES / "real/bert_train_mode.py"), options)
    finding = next(f for f in diagnosis.findings if f.code == "OD206")
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    expected = sum(isinstance(m, torch.nn.Dropout) for m in BertModel(config).modules())
    assert expected > 0
    assert f"{expected} mode-sensitive module(s)" in finding.message, finding.message


BERT_TOO_LONG = '''
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import BertConfig, BertModel


class Wrapper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=32)
        self.bert = BertModel(config).eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=ids).last_hidden_state


def get_model():
    torch.manual_seed(0)
    return Wrapper(), (torch.randint(0, 64, (1, 40)),)  # longer than max_position_embeddings
'''


@pytest.mark.slow
def test_a_failure_inside_transformers_names_the_users_line_and_the_library_frame(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    script = tmp_path / "bert_too_long.py"
    script.write_text(BERT_TOO_LONG, encoding="utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(exporter="dynamo", fix=False, timeout=300))
    (finding,) = [f for f in diagnosis.findings if f.code == "OD108"]
    call = 1 + next(i for i, line in enumerate(BERT_TOO_LONG.splitlines()) if "self.bert(" in line)
    assert finding.source == f"bert_too_long.py:{call}", finding.source  # the user's call into the library
    first = finding.evidence[0].splitlines()
    assert first[0].startswith("RuntimeError: The expanded size"), first
    assert first[1].startswith("  at transformers/models/bert/modeling_bert.py:"), first
    assert ", in forward: " in first[1]


STANDIN = '''import torch


# What torchvision's Python does first: register a fake kernel for its compiled nms op. Without
# the compiled ops (a build for another torch, or a CUDA build beside a CPU torch), torch refuses.
@torch.library.register_fake("torchvision::nms")
def _nms_fake(dets, scores, iou_threshold):
    return torch.empty(0, dtype=torch.long)
'''

SCRIPT = '''import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
import torchvision  # noqa: E402,F401


def get_model():
    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)
'''


@pytest.mark.slow
def test_a_companion_built_for_another_torch_is_an_environment_finding_not_the_script(tmp_path: Path) -> None:
    # A torchvision whose compiled ops are absent (0.28.0: PyPI's CUDA build, for torch 2.13's minor
    # but not its CPU build): torch itself raises "operator torchvision::nms does not exist".
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(STANDIN)
    (tmp_path / "torchvision-0.28.0.dist-info").mkdir()
    (tmp_path / "torchvision-0.28.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    (tmp_path / "model.py").write_text(SCRIPT)
    (diagnosis,) = diagnose(str(tmp_path / "model.py"), DiagnoseOptions(fix=False, timeout=120))
    [finding] = [f for f in diagnosis.findings if f.stage.value == "load"]
    assert finding.code == "OD099", finding
    assert "torchvision 0.28.0" in finding.message and "CPU build" in finding.message
    assert "download.pytorch.org/whl/cpu" in finding.message
    assert any("operator torchvision::nms does not exist" in e for e in finding.evidence)


@pytest.mark.slow
def test_a_failure_replayed_by_torch_names_the_innermost_cause_its_op_and_the_library_line() -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    options = DiagnoseOptions(exporter="dynamo", timeout=600)
    (diagnosis,) = diagnose(str(FIXTURES / "real/swin_view_in_decomposition.py"), options)
    (finding,) = [f for f in diagnosis.findings if f.stage.value == "export"]
    assert finding.message.startswith("Cannot view a tensor with shape"), finding.message  # not torch's preamble
    assert "[aten::view at transformers/models/swin/modeling_swin.py:" in finding.message, finding.message
    assert finding.op == "aten::view"
    frame = finding.evidence[0].splitlines()[1]
    assert frame.startswith("  at transformers/models/swin/modeling_swin.py:") and ".reshape(" in frame, frame
    checks = {fix.kind: fix.check for fix in finding.fixes}
    assert checks["exporter"] is not None and checks["exporter"].works, checks


@pytest.mark.slow
def test_a_data_dependent_branch_inside_a_library_is_named_there_with_what_can_work() -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    (diagnosis,) = diagnose(str(FIXTURES / "real/longformer_global_attention_branch.py"), DiagnoseOptions(timeout=600))
    (finding,) = [f for f in diagnosis.findings if f.stage.value == "export"]
    assert finding.code == "OD204", finding
    frame = finding.evidence[0].splitlines()[1]
    assert frame.startswith("  at transformers/models/longformer/modeling_longformer.py:"), frame
    assert "if is_global_attn:" in frame
    fixes = {fix.kind: fix for fix in finding.fixes}
    advice = fixes["control_flow"]
    assert "library code you cannot edit" in advice.title and "modeling_longformer.py" in advice.title
    assert "import transformers.models.longformer.modeling_longformer as library" in advice.snippet
    exporter = fixes["exporter"]
    assert exporter.verified is True and exporter.check is not None
    assert "matches at" in exporter.check.detail  # checked beyond the example input, and says so
