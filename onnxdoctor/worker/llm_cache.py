"""A decoder exported with its key/value cache, checked by a short greedy decode in ONNX Runtime.

The `flat_cache` fix (analysis/fixes/llm_cache.py) exports a transformers decoder with its cache
as plain tensors. One forward pass at the example inputs (PARITY) says little about generation:
the past must come back as the next step's input, at lengths that grow by one each step, from an
empty past at the prefill. `greedy_decode` runs exactly that in ONNX Runtime and compares each
step with eager PyTorch recomputing the whole sequence without a cache (the truest reference: it
shares no cache code with what it checks).
"""

from __future__ import annotations

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


def greedy_decode(session: Any, eager: Any, step: DecodeCheck, atol: float, rtol: float) -> dict[str, Any]:
    """Greedy decoding in ONNX Runtime with the exported cache, against eager PyTorch.

    At each prompt length (batch 1, seeded random tokens): a prefill with an empty past, then
    `step.steps` decode steps of one token each, feeding the `present_*` outputs back as the
    `past_*` inputs. Each step's last-position logits are compared with `eager` run on the whole
    sequence with `use_cache=False`.

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
    wanted = {"input_ids", "attention_mask"} - set(inputs)
    missing = [PRESENT + n[len(PAST):] for n in past_names if PRESENT + n[len(PAST):] not in outputs]
    if wanted or "logits" not in outputs or not past_names or missing or not isinstance(eager, torch.nn.Module):
        raise StageFailed(
            "the exported model does not have the flat-cache interface the decode check needs "
            "(inputs input_ids, attention_mask, past_*; outputs logits, present_*; the wrapper's "
            f"`model` attribute); missing: {sorted(wanted) + missing or 'the eager model'}", "OD699")
    empty = {name: np.zeros(_empty_shape(inputs[name].shape), _NUMPY_TYPES.get(inputs[name].type, "float32"))
             for name in past_names}
    ids_type = _NUMPY_TYPES.get(inputs["input_ids"].type, "int64")
    mask_type = _NUMPY_TYPES.get(inputs["attention_mask"].type, "int64")
    vocab = session.get_outputs()[outputs.index("logits")].shape[-1]
    if not isinstance(vocab, int):
        vocab = eager.config.get_text_config(decoder=True).vocab_size
    generator = torch.Generator().manual_seed(0)
    largest_diff, runs, problem = 0.0, [], ""
    for length in step.prompt_lengths:
        sequence = torch.randint(0, vocab, (1, length), generator=generator)
        fed, past = sequence.numpy().astype(ids_type), dict(empty)
        onnx_tokens: list[int] = []
        eager_tokens: list[int] = []
        for position in range(step.steps + 1):
            feeds = {"input_ids": fed, "attention_mask": np.ones((1, sequence.shape[1]), mask_type), **past}
            got = dict(zip(outputs, session.run(None, feeds)))
            with torch.no_grad():
                expected = eager(input_ids=sequence, use_cache=False).logits[0, -1].float().numpy()
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
             "tokens_equal": not problem, "runs": runs}
    if problem:
        raise StageFailed(f"greedy decoding with the exported cache differs: {problem}", "OD601", decode=facts)
    return facts


def _empty_shape(shape: list[Any]) -> tuple[int, ...]:
    """A past input's shape at batch 1 with no past tokens: [batch, heads, past, head_dim]."""
    if len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
        raise StageFailed(f"a past input's shape {shape} is not [batch, heads, past_sequence, head_dim] "
                          "with fixed heads and head size", "OD699")
    return (1, shape[1], 0, shape[3])
