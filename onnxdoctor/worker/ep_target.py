"""ONNX Runtime's GPU execution providers as deployment targets, run for real where a GPU is.

`ort-cuda` and `ort-tensorrt` run the exported model in an ONNX Runtime session whose providers
put the GPU first and the CPU last, as a deployment does. ONNX Runtime assigns each node to the
first provider that takes it and runs the rest on the CPU without a word; the session's profile
names the provider of every node it ran, which is how the record says which nodes fell back.
Without the provider in this onnxruntime build, or without a device it can open, the target is
skipped with one line saying which (docs/targets.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from onnxdoctor.worker.openvino_target import with_seconds

PROVIDERS: dict[str, tuple[str, ...]] = {
    "ort-cuda": ("CUDAExecutionProvider",),
    "ort-tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider"),
}
CPU = "CPUExecutionProvider"
# Profile entries that are ONNX Runtime's own copies between devices, not the model's nodes.
_COPIES = ("MemcpyToHost", "MemcpyFromHost")
_MAX_INPUT_BYTES = 256 * 2**20


def unavailable(target: str) -> str | None:
    """Why `target` cannot run here (one line), or None when its provider is in this build."""
    import onnxruntime as ort

    wanted = PROVIDERS[target][0]
    if wanted not in ort.get_available_providers():
        return (f"not run: onnxruntime {ort.__version__} here has no {wanted} (a GPU build such as "
                "onnxruntime-gpu provides it, on a machine with a GPU)")
    return None


def node_providers(profile: str | Path) -> dict[str, dict[str, str]]:
    """Each node an ONNX Runtime profile ran, by name: its op and the provider that ran it."""
    events = json.loads(Path(profile).read_text("utf-8"))
    placed: dict[str, dict[str, str]] = {}
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or "provider" not in args:
            continue
        name = str(event.get("name", "")).removesuffix("_kernel_time")
        if args.get("op_name") in _COPIES or name.endswith(("_fence_before", "_fence_after")):
            continue
        placed[name] = {"op": str(args.get("op_name", "")), "provider": str(args["provider"])}
    return placed


def run_on_providers(
    target: str,
    onnx_path: str,
    feeds: list[Any] | None,
    reference: list[Any] | None,
    atol: float,
    rtol: float,
    workdir: Path,
    providers: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """One real run of the model with the target's providers (then the CPU) as plain data.

    `providers` overrides the target's own (the tests run the same path on the CPU provider).
    Optimisations stay off so that the profile names the model's own nodes, not fused ones.
    """
    import onnxruntime as ort

    started = time.perf_counter()
    chosen = providers or PROVIDERS[target]
    record: dict[str, Any] = {"event": "target", "target": target, "reached": None, "status": "failed",
                              "unconverted": [], "error": "", "version": ort.__version__}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.enable_profiling = True
    options.profile_file_prefix = str(workdir / f"profile-{target}")
    try:
        session = ort.InferenceSession(onnx_path, options, providers=[*chosen, *((CPU,) if CPU not in chosen else ())])
    except Exception as exc:  # the provider refused the model: its message says why
        record.update(error=str(exc)[-600:], step="load")
        return with_seconds(record, started)
    if chosen[0] not in session.get_providers():
        # ONNX Runtime drops a provider that cannot open its device and carries on with the CPU.
        session.end_profiling()
        record.update(status="skipped", error=f"not run: {chosen[0]} is installed but could not open a device")
        return with_seconds(record, started)
    record["reached"] = "load"
    try:
        if feeds is None:  # a file: the pipeline's own random inputs from the declared shapes
            from onnxdoctor.worker.runtime import random_feeds

            given, _described = random_feeds(session, {}, _MAX_INPUT_BYTES)
        else:
            given = dict(zip([i.name for i in session.get_inputs()], feeds))
        outputs = list(session.run(None, given))
        record["reached"] = "run"
    except Exception as exc:
        record.update(error=str(exc)[-600:], step="run")
        return with_seconds(record, started)
    finally:
        profile = session.end_profiling()
    placed = node_providers(profile)
    record["providers"] = sorted({p["provider"] for p in placed.values()})
    record["on_cpu"] = [{"node": name, "op": p["op"]} for name, p in placed.items()
                        if p["provider"] == CPU and chosen[0] != CPU]
    if reference is not None:
        from onnxdoctor.worker.parity import compare_outputs

        report = compare_outputs(reference, outputs, atol, rtol)
        record["max_abs_diff"] = report.get("max_abs_diff")
        if report.get("code"):
            record.update(error=str(report.get("message") or "outputs differ from PyTorch"), step="parity")
            return with_seconds(record, started)
        record["reached"] = "parity"
    record["status"] = "passed"
    return with_seconds(record, started)
