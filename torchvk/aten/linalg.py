"""torch.linalg.solve, inv, det, slogdet, cholesky and solve_triangular (and cholesky_solve /
cholesky_inverse, two triangular solves) on tvk, as tvk ops registered
above autograd (autograd differentiates them; pivot choices are discrete).

solve, inv, det and slogdet: Gauss-Jordan elimination with partial pivoting.

Each of the n steps picks the largest remaining entry of the column as pivot (a row swap by a
gather), scales the pivot row and eliminates the column from every other row: about a dozen
kernels a step, batched over the leading dims, so it suits the small systems models solve in a
training step (tens to a few hundred unknowns), not large factorizations. A zero pivot marks the
matrix singular: info (the first such step, 1-based) as torch reports it, and linalg.inv / solve
raise torch.linalg.LinAlgError as on CUDA. cholesky: column by column (info: the first column
whose diagonal is not positive); solve_triangular: substitution row by row. All are n steps of a
few kernels each.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _eliminate(A, B):
    """(A^-1 B, (det A, its sign, log |det A|), info) for A (..., n, n) and B (..., n, k) of the same
    batch dims. det is the pivots' product (exact signs and zeros), the log a sum of logs (no overflow)."""
    n = A.shape[-1]
    M = torch.cat([A, B], -1)
    batch = M.shape[:-2]
    rows = torch.arange(n, device=A.device)
    det = torch.ones(batch, dtype=A.dtype, device=A.device)
    sign = torch.ones(batch, dtype=A.dtype, device=A.device)
    logabs = torch.zeros(batch, dtype=A.dtype, device=A.device)
    info = torch.zeros(batch, dtype=torch.int32, device=A.device)
    for k in range(n):
        p = M[..., k:, k].abs().argmax(-1) + k  # the pivot row
        swap = torch.where(rows == k, p.unsqueeze(-1), torch.where(rows == p.unsqueeze(-1), k, rows))
        M = M.gather(-2, swap.unsqueeze(-1).expand(M.shape))
        det, sign = torch.where(p != k, -det, det), torch.where(p != k, -sign, sign)
        piv = M[..., k, k]
        singular = piv == 0
        info = torch.where(singular & (info == 0), torch.full_like(info, k + 1), info)
        det, sign = det * piv, sign * torch.sign(piv)
        logabs = logabs + piv.abs().log()
        row = M[..., k, :] / torch.where(singular, torch.ones_like(piv), piv).unsqueeze(-1)
        factor = torch.where(rows == k, torch.zeros_like(M[..., :, k]), M[..., :, k])
        M = M - factor.unsqueeze(-1) * row.unsqueeze(-2)
        M = torch.where((rows == k).unsqueeze(-1), row.unsqueeze(-2).expand(M.shape), M)
    return M[..., :, n:], (det, sign, logabs), info


def _square(A, op):
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} "
                           "matrices" if A.dim() >= 2 else f"{op}: The input tensor A must have at least 2 dimensions.")
    if not A.is_floating_point():
        raise RuntimeError(f"{op}: Expected a floating point tensor as input. Got {A.dtype}")


def _raise_on_info(info, op, why):
    """torch.linalg.LinAlgError for the first matrix whose info is not 0, as torch words it:
    why(info value) says what failed."""
    bad = torch.nonzero(info.reshape(-1)).reshape(-1)
    if bad.numel():
        first = int(bad[0])
        where = f"(Batch element {first}): " if info.dim() else ""
        raise torch.linalg.LinAlgError(f"{op}: {where}{why(int(info.reshape(-1)[first]))}")


def _raise_if_singular(info, op):
    _raise_on_info(info, op, lambda k: f"The solver failed because the input matrix is singular (diagonal element "
                                       f"{k} of its LU factor is zero).")


def _solve(A, B, left):
    _square(A, "linalg.solve")
    vector = B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    rhs = B.unsqueeze(-1) if vector else B
    if not left:
        A, rhs = A.mT, rhs.mT
    batch = torch.broadcast_shapes(A.shape[:-2], rhs.shape[:-2])
    X, _, info = _eliminate(A.expand(*batch, *A.shape[-2:]), rhs.expand(*batch, *rhs.shape[-2:]))
    if not left:
        X = X.mT
    return (X.squeeze(-1) if vector else X), info


def linalg_solve_ex(A, B, *, left=True, check_errors=False):
    X, info = _solve(A, B, left)
    if check_errors:
        _raise_if_singular(info, "linalg.solve_ex")
    return X, info


def linalg_solve(A, B, *, left=True):
    X, info = _solve(A, B, left)
    _raise_if_singular(info, "linalg.solve")
    return X


def linalg_inv_ex(A, *, check_errors=False):
    _square(A, "linalg.inv")
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(A.shape)
    X, _, info = _eliminate(A, eye)
    if check_errors:
        _raise_if_singular(info, "linalg.inv_ex")
    return X, info


def linalg_inv(A):
    X, info = linalg_inv_ex(A)
    _raise_if_singular(info, "linalg.inv")
    return X


def linalg_slogdet(A):
    _square(A, "linalg.slogdet")
    if A.shape[-1] == 0:  # det 1, still a function of A for autograd (as torch's)
        zero = A.sum((-2, -1))
        return zero + 1, zero
    return _eliminate(A, A[..., :, :0])[1][1:]


def linalg_det(A):
    _square(A, "linalg.det")
    if A.shape[-1] == 0:
        return A.sum((-2, -1)) + 1
    return _eliminate(A, A[..., :, :0])[1][0]


def logdet(A):
    sign, logabs = linalg_slogdet(A)
    return torch.where(sign < 0, torch.full_like(logabs, float("nan")), torch.where(sign == 0, torch.full_like(
        logabs, float("-inf")), logabs))


def linalg_cholesky_ex(A, *, upper=False, check_errors=False):
    """L with A = L L^H (the lower triangle of A is read), column by column."""
    _square(A, "linalg.cholesky")
    # the symmetric matrix of A's lower triangle, with torch's symmetric gradient (half to (i, j), half to (j, i))
    half = (A + A.mT) / 2
    A = (A.tril() + A.tril(-1).mT).detach() + (half - half.detach())
    n = A.shape[-1]
    rows = torch.arange(n, device=A.device)
    L = torch.zeros_like(A) if n else A.clone()  # empty: still a function of A for autograd (as torch's)
    info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
    for j in range(n):
        d = A[..., j, j] - (L[..., j, :j] ** 2).sum(-1)
        bad = ~(d > 0)
        info = torch.where(bad & (info == 0), torch.full_like(info, j + 1), info)
        root = torch.where(bad, torch.ones_like(d), d).sqrt()
        col = (A[..., :, j] - (L[..., :, :j] * L[..., j, :j].unsqueeze(-2)).sum(-1)) / root.unsqueeze(-1)
        col = torch.where(rows > j, col, torch.where(rows == j, root.unsqueeze(-1).expand(col.shape), torch.zeros_like(col)))
        L = torch.where(rows == j, col.unsqueeze(-1), L)
    if check_errors:
        _raise_not_positive_definite(info, "linalg.cholesky_ex")
    return (L.mT if upper else L), info


def _raise_not_positive_definite(info, op):
    _raise_on_info(info, op, lambda k: f"The factorization could not be completed because the input is not "
                                       f"positive-definite (the leading minor of order {k} is not positive-definite).")


def linalg_cholesky(A, *, upper=False):
    L, info = linalg_cholesky_ex(A, upper=upper)
    _raise_not_positive_definite(info, "linalg.cholesky")
    return L


def linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with A X = B (left) or X A = B, A triangular: substitution, one row of X a step."""
    _square(A, "linalg.solve_triangular")
    if not left:  # X A = B  <=>  A^T X^T = B^T, A^T triangular the other way
        return linalg_solve_triangular(A.mT, B.mT, upper=not upper, unitriangular=unitriangular).mT
    n = A.shape[-1]
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    A, B = A.expand(*batch, n, n), B.expand(*batch, *B.shape[-2:])
    rows = torch.arange(n, device=A.device)
    X = torch.zeros_like(B)
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        r = B[..., i, :] - (A[..., i, :].unsqueeze(-1) * X).sum(-2)  # X's unsolved rows are still 0
        if not unitriangular:
            r = r / A[..., i, i].unsqueeze(-1)
        X = torch.where((rows == i).unsqueeze(-1), r.unsqueeze(-2), X)
    return X


def _cholesky_solve(B, L, upper):
    """X with A X = B for A = L L^H (or U^H U): two triangular solves."""
    if upper:
        return linalg_solve_triangular(L, linalg_solve_triangular(L.mT, B, upper=False), upper=True)
    return linalg_solve_triangular(L.mT, linalg_solve_triangular(L, B, upper=False), upper=True)


class _CholeskySolve(torch.autograd.Function):
    """torch's gradient for the factor: the whole of L (it reads one triangle, its backward does not)."""

    @staticmethod
    def forward(ctx, B, L, upper):
        X = _cholesky_solve(B, L, upper)
        ctx.save_for_backward(L, X)
        ctx.upper = upper
        return X

    @staticmethod
    def backward(ctx, G):
        L, X = ctx.saved_tensors
        grad_B = _cholesky_solve(G, L, ctx.upper)
        common = grad_B @ X.mT
        common = common + common.mT
        return grad_B, -(L @ common if ctx.upper else common @ L), None


def cholesky_solve(B, L, upper=False):
    return _CholeskySolve.apply(B, L, upper)


def cholesky_inverse(L, upper=False):
    eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device).expand(L.shape)
    return cholesky_solve(eye, L, upper)


def cholesky(A, upper=False):  # the deprecated torch.cholesky
    return linalg_cholesky(A, upper=upper)


_lib = torch.library.Library("aten", "IMPL")
for _name, _fn in (("linalg_solve_ex", linalg_solve_ex), ("linalg_solve", linalg_solve), ("linalg_inv_ex", linalg_inv_ex),
                   ("linalg_inv", linalg_inv), ("linalg_det", linalg_det), ("linalg_slogdet", linalg_slogdet),
                   ("logdet", logdet), ("linalg_cholesky_ex", linalg_cholesky_ex), ("linalg_cholesky", linalg_cholesky),
                   ("linalg_solve_triangular", linalg_solve_triangular), ("cholesky_solve", cholesky_solve),
                   ("cholesky_inverse", cholesky_inverse), ("cholesky", cholesky)):
    _lib.impl(_name, _fn, "AutogradPrivateUse1")
