"""General mechanisms for failures not seen before (issue 22), written after the sixtieth
first-seen batch (fixtures/corpus/first_seen_2026-12-06t.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


@pytest.mark.slow
def test_an_error_raised_by_the_op_the_users_line_calls_names_that_op() -> None:
    # clovaai/deep-text-recognition-benchmark#76: `input_char.unsqueeze(1)` on a 0-d tensor the
    # tracer made of `torch.LongTensor(batch_size)`: C++ raises from the call on the user's line.
    script = CORPUS / "legacy_longtensor_traced_batch_size_zero_dim_attn_decoder_deep_text_recognition_benchmark_76.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    line = script.read_text().splitlines().index("        input_char = input_char.unsqueeze(1)") + 1
    assert (finding.code, finding.op, finding.source) == ("OD299", "aten::unsqueeze", f"{script.name}:{line}"), finding


def test_a_line_calling_several_ops_or_a_module_names_none(tmp_path: Path) -> None:
    from onnxdoctor.worker.failures import op_on_raising_line

    script = tmp_path / "model.py"
    script.write_text("import torch\n\ndef one(x):\n    return x.unsqueeze(5)\n\n"
                      "def two(x):\n    return x.unsqueeze(5).sum(1)\n")
    namespace: dict[str, object] = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    import torch

    for name, expected in (("one", "aten::unsqueeze"), ("two", None)):
        try:
            namespace[name](torch.zeros(2))
        except IndexError as exc:
            assert op_on_raising_line(exc, script) == expected
        else:
            raise AssertionError("unsqueeze(5) of a 1-d tensor should raise")
