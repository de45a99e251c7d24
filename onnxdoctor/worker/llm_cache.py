"""A decoder exported with its key/value cache, checked by a short greedy decode in ONNX Runtime.

The `flat_cache` fix (analysis/fixes/llm_cache.py) exports a transformers decoder with its cache
as plain tensors. One forward pass at the example inputs (PARITY) says little about generation:
the past must come back as the next step's input, at lengths that grow by one each step, from an
empty past at the prefill. `greedy_decode` runs exactly that in ONNX Runtime and compares each
step with eager PyTorch recomputing the whole sequence without a cache (the truest reference: it
shares no cache code with what it checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onnxdoctor.recipe import DecodeCheck
from onnxdoctor.worker.tracebacks import StageFailed

PAST, PRESENT = "past_", "present_"
_NUMPY_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
                "tensor(bfloat16)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32"}


def cache_facts(model: Any) -> dict[str, Any]:
    """LOAD facts the cache fixes need: whether the transformers model is an encoder-decoder."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "use_cache"):
        return {}
    return {"config_is_encoder_decoder": bool(getattr(config, "is_encoder_decoder", False))}


def check_decoding(session: Any, wrapper: Any, step: DecodeCheck, atol: float, rtol: float,
                   encoder_path: Path) -> dict[str, Any]:
    """The `DecodeCheck` of an exported flat-cache module (`wrapper`): for an encoder-decoder, its
    encoder exported to `encoder_path` first; then `greedy_decode` against the wrapped model."""
    from onnxdoctor.worker.runtime import cpu_session

    encoder = cpu_session(str(export_encoder(wrapper, encoder_path))) if step.encoder else None
    facts = greedy_decode(session, getattr(wrapper, "model", None), step, atol, rtol, encoder)
    if step.encoder:
        facts["encoder_path"] = str(encoder_path)
    return facts


def greedy_decode(session: Any, eager: Any, step: DecodeCheck, atol: float, rtol: float,
                  encoder: Any = None) -> dict[str, Any]:
    """Greedy decoding in ONNX Runtime with the exported cache, against eager PyTorch.

    At each prompt length (batch 1, seeded random tokens): a prefill with an empty past, then
    `step.steps` decode steps of one token each, feeding the `present_*` outputs back as the
    `past_*` inputs. Each step's last-position logits are compared with `eager` run on the whole
    sequence with `use_cache=False`. For an encoder-decoder (`encoder`: the encoder's session),
    the prompt goes through the encoder once, whose `encoder_hidden_states` and `cross_*` outputs
    are fed to every decoder step, and the decoder starts from `decoder_start_token_id`.

    Returns:
        The facts of the check: prompt lengths, steps, the tokens, max abs diff of the logits.

    Raises:
        StageFailed: the model does not have the flat-cache interface (OD699), or a token or the
            logits differ (OD601).
    """
    import numpy as np
    import torch

    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    past_names = [name for name in inputs if name.startswith(PAST)]
    ids_name = "decoder_input_ids" if encoder is not None else "input_ids"
    wanted = {ids_name, "attention_mask"} - set(inputs)
    missing = [PRESENT + n[len(PAST):] for n in past_names if PRESENT + n[len(PAST):] not in outputs]
    if wanted or "logits" not in outputs or not past_names or missing or not isinstance(eager, torch.nn.Module):
        raise StageFailed(
            "the exported model does not have the flat-cache interface the decode check needs "
            f"(inputs {ids_name}, attention_mask, past_*; outputs logits, present_*; the wrapper's "
            f"`model` attribute); missing: {sorted(wanted) + missing or 'the eager model'}", "OD699")
    empty = {name: np.zeros(_empty_shape(inputs[name].shape), _NUMPY_TYPES.get(inputs[name].type, "float32"))
             for name in past_names}
    ids_type = _NUMPY_TYPES.get(inputs[ids_name].type, "int64")
    mask_type = _NUMPY_TYPES.get(inputs["attention_mask"].type, "int64")
    vocab = session.get_outputs()[outputs.index("logits")].shape[-1]
    text = eager.config.get_text_config(decoder=True)
    if not isinstance(vocab, int):
        vocab = text.vocab_size
    start = getattr(eager.config, "decoder_start_token_id", None)
    if encoder is not None and start is None:
        raise StageFailed("the encoder-decoder's config has no decoder_start_token_id to start decoding from",
                          "OD699")
    generator = torch.Generator().manual_seed(0)
    largest_diff, runs, problem = 0.0, [], ""
    for length in step.prompt_lengths:
        prompt = torch.randint(0, vocab, (1, length), generator=generator)
        fixed: dict[str, Any] = {}  # fed to every step: the encoder's output and cross-attention cache
        if encoder is not None:
            names = [o.name for o in encoder.get_outputs()]
            fixed = dict(zip(names, encoder.run(None, {"input_ids": prompt.numpy().astype(ids_type),
                                                       "attention_mask": np.ones((1, length), mask_type)})))
            fixed = {name: value for name, value in fixed.items() if name in inputs}
            fixed["attention_mask"] = np.ones((1, length), mask_type)
            sequence = torch.tensor([[int(start)]])
        else:
            sequence = prompt
        fed, past = sequence.numpy().astype(ids_type), dict(empty)
        onnx_tokens: list[int] = []
        eager_tokens: list[int] = []
        for position in range(step.steps + 1):
            mask = {} if encoder is not None else {"attention_mask": np.ones((1, sequence.shape[1]), mask_type)}
            got = dict(zip(outputs, session.run(None, {ids_name: fed, **mask, **fixed, **past})))
            with torch.no_grad():
                called = (eager(input_ids=prompt, decoder_input_ids=sequence, use_cache=False) if encoder is not None
                          else eager(input_ids=sequence, use_cache=False))
            expected = called.logits[0, -1].float().numpy()
            logits = got["logits"][0, -1].astype("float32")
            diff = float(np.abs(logits - expected).max())
            largest_diff = max(largest_diff, diff)
            token, eager_token = int(logits.argmax()), int(expected.argmax())
            onnx_tokens.append(token)
            eager_tokens.append(eager_token)
            where = "the prefill" if position == 0 else f"decode step {position}"
            if token != eager_token and not problem:
                problem = (f"at a prompt of {length} tokens, {where} picks token {token} in ONNX Runtime "
                           f"and {eager_token} in eager PyTorch")
            elif diff > atol + rtol * float(np.abs(expected).max()) and not problem:
                problem = (f"at a prompt of {length} tokens, {where}'s logits differ from eager PyTorch "
                           f"(max abs diff {diff:.3g})")
            if problem:
                break
            sequence = torch.cat([sequence, torch.tensor([[eager_token]])], dim=1)
            fed = np.array([[token]], ids_type)
            past = {name: got[PRESENT + name[len(PAST):]] for name in past_names}
        runs.append({"prompt_length": length, "onnx_tokens": onnx_tokens, "eager_tokens": eager_tokens})
        if problem:
            break
    facts = {"prompt_lengths": list(step.prompt_lengths), "steps": step.steps, "max_abs_diff": largest_diff,
             "tokens_equal": not problem, "runs": runs, "encoder_decoder": encoder is not None}
    if problem:
        raise StageFailed(f"greedy decoding with the exported cache differs: {problem}", "OD601", decode=facts)
    return facts


def export_encoder(wrapper: Any, path: Path) -> Path:
    """Export an encoder-decoder's encoder as its flat-cache wrapper says (`encoder_export()`).

    Raises:
        StageFailed: the wrapper has no `encoder_export`, or the encoder does not export (OD699).
    """
    import torch

    from onnxdoctor.worker.facts import quiet_torch_logs

    if not callable(getattr(wrapper, "encoder_export", None)):
        raise StageFailed("the exported decoder has no encoder_export() to export its encoder with", "OD699")
    module, args, options = wrapper.encoder_export()
    try:
        with quiet_torch_logs():
            torch.onnx.export(module, args, str(path), dynamo=True, **options)
    except Exception as exc:
        raise StageFailed(f"the encoder (with its cross-attention cache) does not export: {exc}", "OD699") from exc
    return path


def _empty_shape(shape: list[Any]) -> tuple[int, ...]:
    """A past input's shape at batch 1 with no past tokens: [batch, heads, past, head_dim]."""
    if len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
        raise StageFailed(f"a past input's shape {shape} is not [batch, heads, past_sequence, head_dim] "
                          "with fixed heads and head size", "OD699")
    return (1, shape[1], 0, shape[3])
