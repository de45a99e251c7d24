"""Symmetric eigendecomposition by a fixed number of Jacobi sweeps (an approximation).

The SVD is linalg.py's one-sided Jacobi, which works on A itself: an SVD through the
eigendecomposition of A^T A would square the condition number."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite
from onnxdoctor.rewrites.linalg import ROUND_ROBIN

JACOBI = ROUND_ROBIN + r'''

def _jacobi_eigh(A):
    """Eigenvalues (ascending) and eigenvectors of symmetric A by parallel Jacobi: each round
    rotates n/2 disjoint (p, q) pairs at once (a round-robin schedule, so that every pair meets
    once per sweep), each rotation zeroing A[p, q]; a fixed number of sweeps, unrolled (enough
    for float32 at these sizes, measured)."""
    n = A.shape[-1]
    sweeps = 4 if n <= 4 else 6 if n <= 24 else 8
    eye = torch.eye(n, dtype=A.dtype, device=A.device)
    schedule = []
    for EP, EQ in _round_robin(A):
        pairs = EP.shape[0]
        # 0/1 matrices [pairs, n * n] place each rotation's entries in J.
        on_diagonal = (EP.unsqueeze(-1) * EP.unsqueeze(-2) + EQ.unsqueeze(-1) * EQ.unsqueeze(-2)).reshape(pairs, n * n)
        off_diagonal = (EP.unsqueeze(-1) * EQ.unsqueeze(-2) - EQ.unsqueeze(-1) * EP.unsqueeze(-2)).reshape(pairs, n * n)
        schedule.append((EP, EQ, on_diagonal, off_diagonal))
    V = eye.expand(A.shape)
    for _ in range(sweeps):
        for EP, EQ, on_diagonal, off_diagonal in schedule:
            AP = EP @ A  # rows p of A
            app, aqq, apq = (AP * EP).sum(-1), ((EQ @ A) * EQ).sum(-1), (AP * EQ).sum(-1)
            zero = apq == 0
            theta = (aqq - app) / (2 * torch.where(zero, torch.ones_like(apq), apq))
            sign = torch.where(theta >= 0, torch.ones_like(theta), -torch.ones_like(theta))
            t = sign / (theta.abs() + torch.sqrt(theta * theta + 1))
            t = torch.where(zero, torch.zeros_like(t), t)
            c = 1 / torch.sqrt(t * t + 1)
            s = t * c
            # J = I except J[p,p] = J[q,q] = c, J[p,q] = s, J[q,p] = -s, every pair at once.
            J = eye + ((c - 1) @ on_diagonal + s @ off_diagonal).reshape(*c.shape[:-1], n, n)
            A = J.transpose(-2, -1) @ A @ J
            V = V @ J
    values = torch.diagonal(A, 0, -2, -1)
    values, order = torch.sort(values, -1)
    vectors = torch.gather(V, -1, order.unsqueeze(-2).expand(V.shape))
    return values, vectors
'''

EIGH = JACOBI + r'''

def linalg_eigh(A, UPLO="L", compute_v=True):
    """torch.linalg.eigh / eigvalsh: the triangle UPLO names, mirrored, then Jacobi."""
    if UPLO == "L":
        lower = torch.tril(A)
        A = lower + torch.tril(A, -1).transpose(-2, -1)
    else:
        upper = torch.triu(A)
        A = upper + torch.triu(A, 1).transpose(-2, -1)
    values, vectors = _jacobi_eigh(A)
    if not compute_v:
        vectors = torch.zeros(0, dtype=A.dtype, device=A.device)
    return values, vectors


def linalg_eigh_public(A, UPLO="L"):
    """torch.linalg.eigh as the exported program names it."""
    return linalg_eigh(A, UPLO)


def linalg_eigvalsh(A, UPLO="L"):
    """torch.linalg.eigvalsh."""
    return linalg_eigh(A, UPLO, compute_v=False)[0]
'''

REWRITES = (
    Rewrite(
        op="aten::linalg_eigh",
        family="eig",
        targets=("aten.linalg_eigh.default", "aten.linalg_eigvalsh.default", "aten._linalg_eigh.default"),
        functions=("linalg_eigh_public", "linalg_eigvalsh", "linalg_eigh"),
        calls=(("torch.linalg.eigh", "linalg_eigh_public"), ("torch.linalg.eigvalsh", "linalg_eigvalsh")),
        function="linalg_eigh",
        source=EIGH,
        exactness=Exactness.APPROXIMATION,
        error="a fixed number of parallel Jacobi sweeps (4 for n <= 4, 6 up to n = 24, 8 beyond): "
        "eigenvalues within 4e-6 of the largest |eigenvalue| and V diag(w) V^T within 4e-5 of A "
        "for random float32 symmetric matrices up to n = 24 (measured against float64 LAPACK); "
        "eigenvector signs may differ from LAPACK's",
        limits="real symmetric matrices, n up to about 24 measured (the graph holds sweeps x (n - 1) "
        "rounds of three n x n products); repeated eigenvalues have no unique eigenvectors (any "
        "basis of their space is returned); complex Hermitian input is not covered",
        reported_as=("aten::linalg_eigh", "aten::linalg_eigvalsh", "aten::_linalg_eigh"),
    ),
)
