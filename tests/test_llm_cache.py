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
GPT2 = FIXTURES / "export/od211_gpt2_cache.py"
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
    program = fix_program(fix, str(GPT2), None, "script")
    assert "fixkit.decode_check(OUTPUT, loaded, DecodeCheck(prompt_lengths=(4, 9), steps=3, encoder=False))" in program
    assert "dynamo=True" in program and "fixkit.apply_load_code(" in program
    compile(program, "fix.py", "exec")


@pytest.mark.slow
def test_a_gpt2_exported_with_its_cache_decodes_to_eager_tokens_and_other_weights_do_not(tmp_path: Path) -> None:
    """fix.py (`--write-fix`) exports GPT-2 with its cache and runs the decode check the worker runs
    (the worker's own run of it, on Llama: tests/test_real_models.py); the same file against a GPT-2
    with other weights fails that check."""
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    fix = _od211_fixes(config_use_cache=True, config_is_encoder_decoder=False)["flat_cache"]
    printed = run_fix_program(fix, GPT2, tmp_path / "fix")
    assert "greedy decoding with the cache gives eager PyTorch's tokens (prompts of 4 and 9 tokens" in printed

    import onnxruntime as ort
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from onnxdoctor.worker.llm_cache import greedy_decode
    from onnxdoctor.worker.tracebacks import StageFailed

    session = ort.InferenceSession(str(tmp_path / "fix" / "fixed.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert names == ["input_ids", "attention_mask", "past_key_0", "past_value_0", "past_key_1", "past_value_1"]
    assert session.get_inputs()[2].shape == ["batch", 4, "past_sequence", 8]  # dynamic past, fixed heads
    torch.manual_seed(1)
    other = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                       initializer_range=0.2)).eval()
    with pytest.raises(StageFailed) as failed:
        greedy_decode(session, other, DecodeCheck(), 1e-4, 1e-3)
    assert failed.value.code == "OD601" and "at a prompt of 4 tokens, the prefill" in failed.value.message


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
