"""MYSELU's CUDA kernel against torch.nn.functional.silu and a device-to-device copy, one run.

    python bench/bench_cuda.py [--sizes 1e6,1e7,1e8] [--repeat 50]

Builds kernels/myselu/myselu_cuda.cu with nvcc into a shared library (in a temporary folder),
calls its extern "C" launchers through ctypes on torch-allocated tensors, checks the result against
torch, and prints milliseconds and GB/s (one read + one write) for float32, float16 and bfloat16.
Without a CUDA device (or nvcc) it says so and exits 0: nothing to measure.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Tuple

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "kernels" / "myselu" / "myselu_cuda.cu"


def build_library(folder: Path) -> ctypes.CDLL:
    """nvcc the kernel for this machine's GPU into folder/libmyselu_cuda.so and load it."""
    nvcc = shutil.which(os.environ.get("NVCC", "nvcc"))
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH")
    library = folder / "libmyselu_cuda.so"
    subprocess.run(
        [nvcc, "-O3", "-std=c++17", "-arch=native", "-shared", "-Xcompiler", "-fPIC", str(SOURCE), "-o", str(library)],
        check=True,
    )
    return ctypes.CDLL(str(library))


def time_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median milliseconds per call measured with CUDA events, after warm-up."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times: List[float] = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main() -> int:
    """Measure and print; exit 0 with a message where there is no GPU."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7,1e8")
    parser.add_argument("--repeat", type=int, default=50)
    options = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device here (torch.cuda.is_available() is False); nothing to measure")
        return 0
    if shutil.which(os.environ.get("NVCC", "nvcc")) is None:
        print("bench_cuda: nvcc is not on PATH; cannot build the kernel")
        return 0
    import torch.nn.functional as F

    with tempfile.TemporaryDirectory() as folder:
        lib = build_library(Path(folder))
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
        print(f"{'elements':>11} {'dtype':<9} {'variant':<10} {'ms':>8} {'GB/s':>8}  vs copy")
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        beta = ctypes.c_float(1.0)
        for size_text in options.sizes.split(","):
            n = int(float(size_text))
            for dtype, suffix in ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")):
                x = torch.randn(n, device="cuda", dtype=dtype)
                y = torch.empty_like(x)
                launch = getattr(lib, f"myselu_launch_{suffix}")
                launch.restype = ctypes.c_int

                def ours() -> None:
                    status = launch(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_int64(n), beta, stream)
                    if status != 0:
                        raise RuntimeError(f"myselu_launch_{suffix} returned cudaError {status}")

                ours()
                torch.testing.assert_close(y.float(), F.silu(x.float()).to(dtype).float(), rtol=2e-2 if suffix != "f32" else 1e-5, atol=1e-3 if suffix != "f32" else 1e-6)
                rows: List[Tuple[str, float]] = [
                    ("myselu", time_ms(ours, options.repeat)),
                    ("F.silu", time_ms(lambda: F.silu(x), options.repeat)),
                    ("copy", time_ms(lambda: y.copy_(x), options.repeat)),
                ]
                copy_ms = rows[-1][1]
                for label, ms in rows:
                    gbps = 2 * x.element_size() * n / (ms / 1e3) / 1e9
                    print(f"{n:>11} {suffix:<9} {label:<10} {ms:>8.3f} {gbps:>8.1f}  {ms / copy_ms:5.2f}x")
                del x, y
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
