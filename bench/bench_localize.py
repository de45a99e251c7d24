"""The search for a dynamo export's first differing value, against torch's own search, same run.

torch's `verify_onnx_program(compare_intermediates=True)` builds an ONNX Runtime session for every
value; onnxdoctor's search (onnxdoctor/worker/parity.py, `_first_differing_info`) computes the
values in one run per 256 MiB of PyTorch's values. Both walk a stack of transformer blocks whose
every value agrees (the search's worst case: nothing stops it early), at a few depths; the ratio
is torch's seconds over ours, and both must compare the same values.

Usage: python bench/bench_localize.py [--depths 2 8 24] [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _model(depth: int) -> Any:
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, depth, enable_nested_tensor=False).eval()


def _timed(fn: Any, repeat: int) -> tuple[float, Any]:
    seconds, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 8, 24])
    parser.add_argument("--repeat", type=int, default=1)
    options = parser.parse_args()

    import torch
    from torch.onnx import verification

    from onnxdoctor.worker.facts import quiet_torch_logs
    from onnxdoctor.worker.parity import _first_differing_info

    print(f"{'depth':>5} {'values':>6} {'torch s':>8} {'ours s':>7} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as folder, quiet_torch_logs():
        for depth in options.depths:
            args = (torch.randn(2, 16, 64),)
            with torch.no_grad():
                program = torch.onnx.export(_model(depth), args, dynamo=True, verbose=False)
            path = Path(folder) / f"depth{depth}.onnx"
            program.save(str(path))
            state = {"loaded": SimpleNamespace(args=args, kwargs={}), "onnx_program": program, "onnx_path": path}
            theirs_s, infos = _timed(functools.partial(verification.verify_onnx_program, program, args, None,
                                                       compare_intermediates=True), options.repeat)
            ours_s, (found, compared) = _timed(functools.partial(_first_differing_info, state, 1e-4, 1e-3),
                                               options.repeat)
            if found is not None or compared != len(infos):
                raise SystemExit(f"depth {depth}: the searches disagree ({compared} vs {len(infos)} values, "
                                 f"ours found {found and found.name})")
            print(f"{depth:>5} {compared:>6} {theirs_s:>8.2f} {ours_s:>7.2f} {theirs_s / ours_s:>5.0f}x")


if __name__ == "__main__":
    main()
