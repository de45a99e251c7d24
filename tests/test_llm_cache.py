"""LLM exports that keep their cache: the flat_cache fix (OD211) and its greedy-decode check."""

from __future__ import annotations

from pathlib import Path

import pytest
from fix_programs import run_fix_program

from onnxdoctor.analysis.findings import make_finding
from onnxdoctor.analysis.fixes import propose_fixes
from onnxdoctor.analysis.fixes.program import fix_program
from onnxdoctor.model import Stage, StageOutcome, Status
from onnxdoctor.recipe import DecodeCheck, LoadCode, Recipe, UseExporter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BART = FIXTURES / "export/od211_bart_cache.py"


def _od211_fixes(**load_facts: object) -> dict[str, object]:
    finding = make_finding("OD211", Stage.EXPORT, "Found DynamicCache in output")
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED, facts=dict(load_facts)),
                StageOutcome(Stage.EXPORT, Status.FAILED, facts={"exporter": "dynamo"})]
    return {fix.kind: fix for fix in propose_fixes(finding, {"outcomes": outcomes})}


def test_a_decoder_only_model_with_a_cache_switch_gets_the_flat_cache_fix_beside_use_cache_off() -> None:
    fixes = _od211_fixes(config_use_cache=True, config_is_encoder_decoder=False)
    assert list(fixes)[:1] == ["use_cache_off"] and "flat_cache" in fixes
    recipe = fixes["flat_cache"].recipe
    assert recipe is not None and recipe.isolated
    assert recipe.first(DecodeCheck) == DecodeCheck(prompt_lengths=(4, 9), steps=3)
    assert recipe.first(UseExporter) == UseExporter("dynamo")
    # What is verified is what the user pastes: the LOAD code is the snippet's wrapper.
    load = recipe.first(LoadCode)
    assert load is not None and load.code in fixes["flat_cache"].snippet
    assert Recipe.from_dict(recipe.to_dict()) == recipe  # crosses the process seam


def test_an_encoder_decoder_gets_the_two_file_cache_fix_and_a_model_without_the_switch_none() -> None:
    fixes = _od211_fixes(config_use_cache=True, config_is_encoder_decoder=True)
    assert "flat_cache" not in fixes
    recipe = fixes["flat_cache_seq2seq"].recipe
    assert recipe is not None and recipe.first(DecodeCheck) == DecodeCheck(encoder=True)
    assert "model.encoder_export()" in fixes["flat_cache_seq2seq"].snippet
    none = _od211_fixes(config_use_cache=None)
    assert "flat_cache" not in none and "flat_cache_seq2seq" not in none


def test_the_written_fix_program_runs_the_decode_check() -> None:
    fix = _od211_fixes(config_use_cache=True, config_is_encoder_decoder=False)["flat_cache"]
    program = fix_program(fix, str(FIXTURES / "export/od211_gpt2_cache.py"), None, "script")
    assert "fixkit.decode_check(OUTPUT, loaded, DecodeCheck(prompt_lengths=(4, 9), steps=3, encoder=False))" in program
    assert "dynamo=True" in program and "fixkit.apply_load_code(" in program
    compile(program, "fix.py", "exec")


def _next_token_model(path: Path) -> None:
    """A hand-built ONNX model with the flat-cache interface: each present is the past with the new
    tokens appended, and the logits pick the token (past + new length) % 5."""
    import onnx
    from onnx import TensorProto, helper

    def dims(*names: object) -> list[object]:
        return list(names)

    nodes = [
        helper.make_node("Constant", [], ["five"], value=helper.make_tensor("five", TensorProto.INT64, [], [5])),
        helper.make_node("Constant", [], ["hot"], value=helper.make_tensor("hot", TensorProto.FLOAT, [2], [0, 1])),
        helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", TensorProto.INT64, [2], [1, 3])),
        helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["ids", "axes"], ["column"]),
        helper.make_node("Concat", ["column", "column"], ["new"], axis=3),
        *[helper.make_node("Concat", [f"past_{kv}_0", "new"], [f"present_{kv}_0"], axis=2) for kv in ("key", "value")],
        # The next token is the length of past + new tokens, mod 5: right only when the past came back.
        helper.make_node("Shape", ["present_key_0"], ["length"], start=2, end=3),
        helper.make_node("Mod", ["length", "five"], ["next_one"]),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Expand", ["next_one", "ids_shape"], ["next"]),
        helper.make_node("OneHot", ["next", "five", "hot"], ["logits"], axis=-1),
    ]
    past = [helper.make_tensor_value_info(f"past_{kv}_0", TensorProto.FLOAT, dims("batch", 1, "past", 2))
            for kv in ("key", "value")]
    present = [helper.make_tensor_value_info(f"present_{kv}_0", TensorProto.FLOAT, dims("batch", 1, "total", 2))
               for kv in ("key", "value")]
    graph = helper.make_graph(
        nodes, "next_token",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims("batch", "sequence")),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dims("batch", "total")), *past],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, dims("batch", "sequence", 5)), *present])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))


def test_the_decode_check_feeds_the_cache_back_and_fails_on_another_token(tmp_path: Path) -> None:
    import onnxruntime as ort
    import torch

    from onnxdoctor.worker.llm_cache import greedy_decode
    from onnxdoctor.worker.tracebacks import StageFailed

    class Config:
        vocab_size = 5

        def get_text_config(self, decoder: bool = False) -> Config:
            return self

    class Output:
        def __init__(self, logits: torch.Tensor) -> None:
            self.logits = logits

    class Eager(torch.nn.Module):
        def __init__(self, shift: int) -> None:
            super().__init__()
            self.config, self.shift = Config(), shift

        def forward(self, input_ids: torch.Tensor, use_cache: bool = False) -> Output:
            # The whole sequence's length (mod 5), plus a shift that makes another model of it.
            picked = torch.full_like(input_ids, (input_ids.shape[1] + self.shift) % 5)
            return Output(torch.nn.functional.one_hot(picked, 5).float())

    _next_token_model(tmp_path / "next.onnx")
    session = ort.InferenceSession(str(tmp_path / "next.onnx"), providers=["CPUExecutionProvider"])
    facts = greedy_decode(session, Eager(0), DecodeCheck(prompt_lengths=(2, 3), steps=3), 1e-4, 1e-3)
    assert facts["tokens_equal"] and facts["max_abs_diff"] == 0.0
    # The past grew by one each step: lengths 2..5 and 3..6, mod 5.
    assert [run["onnx_tokens"] for run in facts["runs"]] == [[2, 3, 4, 0], [3, 4, 0, 1]]
    with pytest.raises(StageFailed) as failed:
        greedy_decode(session, Eager(1), DecodeCheck(prompt_lengths=(2, 3), steps=3), 1e-4, 1e-3)
    assert failed.value.code == "OD601" and "at a prompt of 2 tokens, the prefill picks token" in failed.value.message


@pytest.mark.slow
def test_a_bart_decoder_with_both_caches_and_its_encoder_decode_like_eager(tmp_path: Path) -> None:
    """The encoder-decoder route: fix.py writes the decoder and, beside it, the encoder that
    computes the cross-attention cache, and decodes with both in ONNX Runtime."""
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    fix = _od211_fixes(config_use_cache=True, config_is_encoder_decoder=True)["flat_cache_seq2seq"]
    printed = run_fix_program(fix, BART, tmp_path / "fix")
    assert "greedy decoding with the cache gives eager PyTorch's tokens (prompts of 4 and 9 tokens" in printed
    import onnx

    decoder = onnx.load(str(tmp_path / "fix" / "fixed.onnx"), load_external_data=False)
    encoder = onnx.load(str(tmp_path / "fix" / "fixed-encoder.onnx"), load_external_data=False)
    assert [o.name for o in encoder.graph.output] == [
        "encoder_hidden_states", "cross_key_0", "cross_value_0", "cross_key_1", "cross_value_1"]
    inputs = [i.name for i in decoder.graph.input]
    assert inputs[0] == "decoder_input_ids" and "past_key_1" in inputs and "cross_value_1" in inputs
    assert decoder.graph.output[0].name == "logits"
