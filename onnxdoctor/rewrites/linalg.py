"""Linear algebra: inverse and solve (Gauss-Jordan), Cholesky, slogdet, Vandermonde, SVD (Jacobi),
and the grouped (ragged, mixture-of-experts) matrix product."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

GAUSS_JORDAN = r'''
def _gauss_jordan(A, B):
    """Solve A X = B by Gauss-Jordan elimination with partial pivoting, unrolled over n."""
    n = A.shape[-1]
    rows = torch.arange(n, device=A.device)
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    m = torch.cat([A.expand(*batch, n, n), B.expand(*batch, n, B.shape[-1])], -1)  # [..., n, n + k]
    for col in range(n):
        # The row at or below `col` with the largest |value| in this column becomes the pivot row.
        candidates = torch.where(rows >= col, m[..., :, col].abs(), torch.full_like(m[..., :, col], -1.0))
        is_pivot = (rows == candidates.argmax(-1, keepdim=True)).unsqueeze(-1)  # [..., n, 1]
        is_col = (rows == col).unsqueeze(-1)  # [n, 1]
        pivot_row = (m * is_pivot).sum(-2, keepdim=True)  # [..., 1, n + k]
        col_row = m[..., col : col + 1, :]
        m = torch.where(is_col, pivot_row, torch.where(is_pivot, col_row, m))  # swap (exact)
        normalized = m[..., col : col + 1, :] / m[..., col : col + 1, col : col + 1]
        m = torch.where(is_col, normalized, m - m[..., :, col : col + 1] * normalized)
    return m[..., :, n:]
'''

INV = GAUSS_JORDAN + r'''

def linalg_inv_ex(A, *, check_errors=False):
    """torch.linalg.inv_ex: Gauss-Jordan against the identity."""
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return _gauss_jordan(A, eye), info


def linalg_inv(A):
    """torch.linalg.inv and torch.inverse."""
    return linalg_inv_ex(A)[0]
'''

SOLVE = GAUSS_JORDAN + r'''

def linalg_solve(A, B, *, left=True):
    """torch.linalg.solve: Gauss-Jordan on [A | B] (X A = B is solved as A^T X^T = B^T)."""
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    if vector:
        B = B.unsqueeze(-1)
    if left:
        X = _gauss_jordan(A, B)
    else:
        X = _gauss_jordan(A.transpose(-2, -1), B.transpose(-2, -1)).transpose(-2, -1)
    return X.squeeze(-1) if vector else X
'''

CHOLESKY = r'''
def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """torch.linalg.cholesky, column by column (Cholesky-Banachiewicz), unrolled over n."""
    n = A.shape[-1]
    rows = torch.arange(n, device=A.device)
    columns = []
    for j in range(n):
        v = A[..., :, j]
        if columns:
            done = torch.stack(columns, -1)  # [..., n, j]
            v = v - (done * done[..., j : j + 1, :]).sum(-1)
        d = torch.sqrt(v[..., j : j + 1])
        zero = torch.zeros_like(v)
        columns.append(torch.where(rows > j, v / d, torch.where(rows == j, d.expand_as(v), zero)))
    L = torch.stack(columns, -1)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    return (L.transpose(-2, -1) if upper else L), info


def linalg_cholesky(A, *, upper=False):
    """torch.linalg.cholesky."""
    return linalg_cholesky_ex(A, upper=upper)[0]


def cholesky(A, upper=False):
    """The deprecated torch.cholesky (upper is positional there)."""
    return linalg_cholesky_ex(A, upper=upper)[0]
'''

SLOGDET = r'''
def linalg_slogdet(A):
    """torch.linalg.slogdet and torch.slogdet from the determinant (ONNX Det)."""
    det = torch.linalg.det(A)
    return torch.sign(det), torch.log(det.abs())


def logdet(A):
    """torch.logdet: log(det(A)), NaN for a negative determinant."""
    return torch.log(torch.linalg.det(A))


def _linalg_slogdet(A):
    """The internal overload: torch also returns the LU factorization and pivots (zeros here)."""
    sign, logabsdet = linalg_slogdet(A)
    n = A.shape[-1]
    lu = torch.zeros_like(A)
    pivots = torch.zeros(A.shape[:-2] + (n,), dtype=torch.int32, device=A.device)
    return sign, logabsdet, lu, pivots
'''

VANDER = r'''
def linalg_vander(x, *, N=None):
    """torch.linalg.vander: powers x**0 .. x**(N-1) as repeated products along the last dim."""
    n = x.shape[-1] if N is None else N
    if not x.is_floating_point() and not x.is_complex():
        x = x.to(torch.int64)
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril(-1)  # keep[k, j]: j < k
    base = x.unsqueeze(-1).unsqueeze(-1).expand(*x.shape, n, n)
    terms = torch.where(keep, base, torch.ones((), dtype=x.dtype, device=x.device))
    return terms.prod(-1)
'''

SVD = r'''
def _jacobi_sweeps(n):
    """Sweeps enough at this size: measured on random float32 matrices, 4 reach rounding for n <= 4,
    6 for n <= 8, 8 for n <= 16 (Jacobi converges quadratically); one to four more for margin."""
    return 5 if n <= 4 else 8 if n <= 8 else 12


def _jacobi_svd(A):
    """Thin SVD of A [..., m, n] by one-sided (Hestenes) Jacobi rotations, a fixed number of sweeps
    unrolled over the column pairs; returns U [..., m, k], S [..., k], V [..., n, k], k = min(m, n),
    S descending."""
    m, n = A.shape[-2], A.shape[-1]
    if m < n:  # orthogonalize the shorter side: A^T = V S U^T
        V, S, U = _jacobi_svd(A.transpose(-2, -1))
        return U, S, V
    cols = [A[..., :, j] for j in range(n)]
    eye = torch.eye(n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], n, n)
    vcols = [eye[..., :, j] for j in range(n)]
    eps = torch.finfo(A.dtype).eps
    for _ in range(_jacobi_sweeps(n)):
        for p in range(n - 1):
            for q in range(p + 1, n):
                alpha = (cols[p] * cols[p]).sum(-1, keepdim=True)
                beta = (cols[q] * cols[q]).sum(-1, keepdim=True)
                gamma = (cols[p] * cols[q]).sum(-1, keepdim=True)
                # Columns already orthogonal to working precision are left alone (no 0/0).
                rotate = gamma.abs() > eps * torch.sqrt(alpha * beta)
                zeta = (beta - alpha) / (2 * torch.where(rotate, gamma, torch.ones_like(gamma)))
                sign = torch.where(zeta >= 0, torch.ones_like(zeta), -torch.ones_like(zeta))
                t = torch.where(rotate, sign / (zeta.abs() + torch.sqrt(1 + zeta * zeta)), torch.zeros_like(zeta))
                c = 1 / torch.sqrt(1 + t * t)
                s = c * t
                cols[p], cols[q] = c * cols[p] - s * cols[q], s * cols[p] + c * cols[q]
                vcols[p], vcols[q] = c * vcols[p] - s * vcols[q], s * vcols[p] + c * vcols[q]
    W = torch.stack(cols, -1)  # [..., m, n]: U S
    V = torch.stack(vcols, -1)
    S = torch.sqrt((W * W).sum(-2))
    order = torch.argsort(S, dim=-1, descending=True)
    S = torch.gather(S, -1, order)
    W = torch.gather(W, -1, order.unsqueeze(-2).expand(W.shape))
    V = torch.gather(V, -1, order.unsqueeze(-2).expand(V.shape))
    U = W / torch.where(S > 0, S, torch.ones_like(S)).unsqueeze(-2)
    return U, S, V


def svd(A, some=True, compute_uv=True):
    """torch.svd: U, S, V (V itself, not its transpose)."""
    U, S, V = _jacobi_svd(A)
    if not compute_uv:
        return torch.zeros_like(U), S, torch.zeros_like(V)
    return U, S, V


def _linalg_svd(A, full_matrices=False, compute_uv=True, driver=None):
    """torch.linalg.svd / svdvals (their common internal op): U, S, Vh."""
    if full_matrices and A.shape[-2] != A.shape[-1]:
        raise NotImplementedError("full_matrices=True for a non-square matrix: use full_matrices=False")
    U, S, V = _jacobi_svd(A)
    return U, S, V.transpose(-2, -1)


def linalg_svdvals(A, driver=None):
    """torch.linalg.svdvals: S alone."""
    return _jacobi_svd(A)[1]
'''

GROUPED_MM = r'''
def _grouped_mm(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """torch._grouped_mm: each group's slice times its own matrix (offs: where each group ends),
    computed as the product against every group and a selection of each row's (column's, inner
    slice's) own, in float32 as torch's kernel accumulates, then rounded to the output type."""
    if bias is not None:
        return NotImplemented  # torch itself refuses a bias ("Bias not supported yet")
    dtype = out_dtype if out_dtype is not None else mat_a.dtype
    a, b = mat_a.float(), mat_b.float()
    if a.dim() == 3 and b.dim() == 3:  # a batch of equal groups: no offsets
        return (a @ b).to(dtype)
    if a.dim() == 2 and b.dim() == 3:  # rows of a in groups, one matrix of b each
        group = (torch.arange(a.shape[0], device=a.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
        every = torch.einsum("mk,gkn->mgn", a, b)
        chosen = group.clamp(max=b.shape[0] - 1).view(-1, 1, 1).expand(-1, 1, b.shape[-1])
        return every.gather(1, chosen).squeeze(1).to(dtype)
    if a.dim() == 3 and b.dim() == 2:  # columns of b in groups, one matrix of a each
        group = (torch.arange(b.shape[-1], device=b.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
        every = torch.einsum("gmk,kn->gmn", a, b)
        chosen = group.clamp(max=a.shape[0] - 1).view(1, 1, -1).expand(1, a.shape[1], -1)
        return every.gather(0, chosen).squeeze(0).to(dtype)
    # 2-D by 2-D: the inner dimension in groups, one product per group.
    group = (torch.arange(a.shape[-1], device=a.device).unsqueeze(-1) >= offs.unsqueeze(0)).sum(-1)
    mask = (group.unsqueeze(0) == torch.arange(offs.shape[0], device=a.device).unsqueeze(-1)).float()
    return torch.einsum("mk,gk,kn->gmn", a, mask, b).to(dtype)
'''

EINSUM = r'''
def einsum(equation, tensors, path=None):
    """torch.einsum whose operands' ellipses cover different numbers of dims (torch broadcasts them
    from the right; ONNX's Einsum shape inference wants the same count): the shorter ones get
    size-1 dims where their ellipsis starts, which is what the broadcast does. Any other call is
    left as it is."""
    terms = equation.replace(" ", "").split("->")[0].split(",")
    if "..." not in equation or len(terms) != len(tensors):
        return NotImplemented
    covered = [t.dim() - len(term.replace("...", "")) if "..." in term else None for term, t in zip(terms, tensors)]
    counts = {c for c in covered if c is not None}
    if len(counts) < 2:
        return NotImplemented
    most = max(counts)
    even = []
    for term, t, c in zip(terms, tensors, covered):
        if c is not None and c < most:
            at = term.index("...")
            t = t.reshape(tuple(t.shape[:at]) + (1,) * (most - c) + tuple(t.shape[at:]))
        even.append(t)
    return torch.einsum(equation, *even)
'''

REWRITES = (
    Rewrite(
        op="aten::_grouped_mm",
        family="linalg",
        targets=("aten._grouped_mm.default",),
        function="_grouped_mm",
        source=GROUPED_MM,
        exactness=Exactness.ROUNDING,
        error="float32 accumulation in another order, rounded to the output type: in bfloat16, an "
        "element may land one unit in the last place away",
        limits="computes every group's product for every row (group count times the work of one "
        "matmul, and as much memory for the intermediate); no bias (torch refuses one too); "
        "rows past the last offset get the last group's product (torch leaves them undefined)",
        reported_as=("aten::grouped_mm",),
    ),
    Rewrite(
        op="aten::linalg_inv",
        family="linalg",
        targets=("aten.linalg_inv.default", "aten.inverse.default", "aten.linalg_inv_ex.default"),
        functions=("linalg_inv", "linalg_inv", "linalg_inv_ex"),
        function="linalg_inv",
        source=INV,
        exactness=Exactness.ROUNDING,
        error="Gauss-Jordan with partial pivoting: relative error about cond(A) x machine epsilon",
        limits="static matrix size n (the graph grows as n steps; fine up to n = 64); a singular "
        "matrix gives inf/NaN instead of an error; `info` is always 0",
        reported_as=("aten::linalg_inv_ex", "aten::inverse"),
    ),
    Rewrite(
        op="aten::linalg_solve",
        family="linalg",
        targets=("aten.linalg_solve.default",),
        function="linalg_solve",
        source=SOLVE,
        exactness=Exactness.ROUNDING,
        error="Gauss-Jordan with partial pivoting: relative error about cond(A) x machine epsilon",
        limits="static matrix size n (the graph grows as n steps; fine up to n = 64); a singular "
        "matrix gives inf/NaN instead of an error",
        reported_as=("aten::_linalg_solve_ex", "aten::linalg_solve_ex"),
    ),
    Rewrite(
        op="aten::linalg_cholesky",
        family="linalg",
        targets=("aten.linalg_cholesky.default", "aten.cholesky.default", "aten.linalg_cholesky_ex.default"),
        functions=("linalg_cholesky", "cholesky", "linalg_cholesky_ex"),
        function="linalg_cholesky",
        source=CHOLESKY,
        exactness=Exactness.ROUNDING,
        error="the same algorithm, another summation order: a few ulps times n",
        limits="static matrix size n (the graph grows as n steps); a matrix that is not positive "
        "definite gives NaN instead of an error; `info` is always 0",
        reported_as=("aten::linalg_cholesky_ex", "aten::cholesky"),
    ),
    Rewrite(
        op="aten::linalg_slogdet",
        family="linalg",
        targets=("aten.linalg_slogdet.default", "aten.slogdet.default", "aten.logdet.default",
                 "aten._linalg_slogdet.default"),
        functions=("linalg_slogdet", "linalg_slogdet", "logdet", "_linalg_slogdet"),
        function="linalg_slogdet",
        source=SLOGDET,
        exactness=Exactness.ROUNDING,
        error="log|det| from ONNX Det: relative error about n x machine epsilon",
        limits="the determinant must fit the dtype (float32 overflows beyond about 1e38: use "
        "float64 for large matrices); the internal _linalg_slogdet's LU and pivots outputs are not "
        "computed (zeros)",
        reported_as=("aten::_linalg_slogdet", "aten::slogdet", "aten::logdet"),
    ),
    Rewrite(
        op="aten::einsum",
        family="linalg",
        targets=("aten.einsum.default",),
        function="einsum",
        source=EINSUM,
        exactness=Exactness.EXACT,
        error="none: the same einsum, its operands reshaped with size-1 dims",
        limits="only an equation whose operands' ellipses cover different numbers of dims "
        "(torch broadcasts those; ONNX's shape inference refuses them, or the TorchScript exporter "
        "crashes building the node); other einsums are left as they are",
        when=r"[Ee]llipsis|SIGSEGV|died",
    ),
    Rewrite(
        op="aten::linalg_vander",
        family="linalg",
        targets=("aten.linalg_vander.default",),
        function="linalg_vander",
        source=VANDER,
        exactness=Exactness.ROUNDING,
        error="powers as products in another order: a few ulps",
        limits="memory grows as len(x) x N^2",
        reported_as=("prims::prod",),
    ),
    Rewrite(
        op="aten::svd",
        family="linalg",
        targets=("aten.svd.default", "aten._linalg_svd.default", "aten.linalg_svdvals.default"),
        functions=("svd", "_linalg_svd", "linalg_svdvals"),
        function="svd",
        source=SVD,
        exactness=Exactness.APPROXIMATION,
        error="one-sided Jacobi with a fixed number of sweeps (5 for min(m, n) <= 4, 8 up to 8, 12 "
        "beyond): on random float32 matrices up to 16 x 16, singular values within 2e-6 of LAPACK's "
        "relative to the largest and U orthonormal to 2e-6 (measured, not a proven bound: a matrix "
        "that needs more sweeps is left less converged); singular vectors are unique only up to sign (and, for repeated "
        "singular values, up to a rotation within their subspace), as between LAPACK drivers: code "
        "using U and V together (U diag(S) V^T, V U^T) gets the same result, code using one alone "
        "may not",
        limits="static matrix shape; the graph grows as sweeps x min(m,n)^2 / 2 rotations (fine up to "
        "min(m, n) = 16, not measured beyond); full_matrices=True only for square matrices; U's columns for zero singular "
        "values are zero (LAPACK completes them to an orthonormal basis)",
        reported_as=("aten::_linalg_svd", "aten::linalg_svd"),
    ),
)
