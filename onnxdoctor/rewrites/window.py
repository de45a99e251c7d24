"""Window functions the dynamo exporter gets wrong (hamming_window), and the FFT sample
frequencies it has no function for (fftfreq, rfftfreq: creation ops, arange times 1 / (n d))."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

HAMMING = r'''
def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, layout=None,
                   device=None, pin_memory=None):
    """torch.hamming_window: alpha - beta cos(2 pi n / N), N = window_length for a periodic
    window and window_length - 1 for a symmetric one (torch's defaults 0.54 / 0.46)."""
    dtype = dtype or torch.get_default_dtype()
    if window_length == 1:
        return torch.ones(1, dtype=dtype, device=device)
    period = window_length if periodic else window_length - 1
    n = torch.arange(window_length, dtype=dtype, device=device)
    return alpha - beta * torch.cos(n * (2 * math.pi / period))


def hamming_window_default(window_length, *, dtype=None, layout=None, device=None, pin_memory=None):
    """torch.hamming_window(N) (periodic)."""
    return hamming_window(window_length, dtype=dtype, device=device)


def hamming_window_periodic(window_length, periodic, *, dtype=None, layout=None, device=None, pin_memory=None):
    """torch.hamming_window(N, periodic)."""
    return hamming_window(window_length, periodic, dtype=dtype, device=device)


def hamming_window_alpha(window_length, periodic, alpha, *, dtype=None, layout=None, device=None,
                         pin_memory=None):
    """torch.hamming_window(N, periodic, alpha): beta stays 0.46, as torch's."""
    return hamming_window(window_length, periodic, alpha, dtype=dtype, device=device)
'''

FFTFREQ = r'''
def fft_rfftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """torch.fft.rfftfreq: [0, 1, ..., n // 2] / (n d), as torch computes it (times 1 / (n d))."""
    return torch.arange(n // 2 + 1, dtype=dtype or torch.get_default_dtype(), device=device) * (1.0 / (n * d))


def fft_fftfreq(n, d=1.0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """torch.fft.fftfreq: [0, 1, ..., (n - 1) // 2, -(n // 2), ..., -1] / (n d)."""
    k = torch.arange(n, dtype=dtype or torch.get_default_dtype(), device=device)
    return torch.where(k < (n + 1) // 2, k, k - n) * (1.0 / (n * d))
'''

REWRITES = (
    Rewrite(
        op="aten::hamming_window",
        family="window",
        targets=("aten.hamming_window.default", "aten.hamming_window.periodic",
                 "aten.hamming_window.periodic_alpha", "aten.hamming_window.periodic_alpha_beta"),
        functions=("hamming_window_default", "hamming_window_periodic", "hamming_window_alpha",
                   "hamming_window"),
        function="hamming_window",
        source=HAMMING,
        exactness=Exactness.ROUNDING,
        error="torch's formula; cos rounded by another library (about 1e-7). The dynamo exporter "
        "of torch 2.13 writes this window with alpha = 25/46, beta = 21/46 whatever torch was "
        "given: wrong numbers (up to 0.007 at the defaults) and no error",
        limits="float windows; window_length a Python int (it is in torch's signature)",
    ),
    Rewrite(
        op="aten::fft_rfftfreq",
        family="window",
        targets=("aten.fft_rfftfreq.default",),
        function="fft_rfftfreq",
        source=FFTFREQ,
        exactness=Exactness.EXACT,
        error="the same values (torch multiplies by 1 / (n d) too)",
        limits="n and d known when exporting (they are Python numbers in the call)",
    ),
    Rewrite(
        op="aten::fft_fftfreq",
        family="window",
        targets=("aten.fft_fftfreq.default",),
        function="fft_fftfreq",
        source=FFTFREQ,
        exactness=Exactness.EXACT,
        error="the same values (torch multiplies by 1 / (n d) too)",
        limits="n and d known when exporting (they are Python numbers in the call)",
    ),
)
