"""torch.linalg.solve, inv and det on tvk: Gauss-Jordan elimination with partial pivoting as tvk ops,
registered above autograd (autograd differentiates the elimination; the pivot choice is discrete).

Each of the n steps picks the largest remaining entry of the column as pivot (a row swap by a
gather), scales the pivot row and eliminates the column from every other row: about a dozen
kernels a step, batched over the leading dims, so it suits the small systems models solve in a
training step (tens to a few hundred unknowns), not large factorizations. A zero pivot marks the
matrix singular: info (the first such step, 1-based) as torch reports it, and linalg.inv / solve
raise torch.linalg.LinAlgError as on CUDA.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _eliminate(A, B):
    """(A^-1 B, det A, info) for A (..., n, n) and B (..., n, k) of the same batch dims."""
    n = A.shape[-1]
    M = torch.cat([A, B], -1)
    batch = M.shape[:-2]
    rows = torch.arange(n, device=A.device)
    det = torch.ones(batch, dtype=A.dtype, device=A.device)
    info = torch.zeros(batch, dtype=torch.int32, device=A.device)
    for k in range(n):
        p = M[..., k:, k].abs().argmax(-1) + k  # the pivot row
        swap = torch.where(rows == k, p.unsqueeze(-1), torch.where(rows == p.unsqueeze(-1), k, rows))
        M = M.gather(-2, swap.unsqueeze(-1).expand(M.shape))
        det = torch.where(p != k, -det, det)
        piv = M[..., k, k]
        singular = piv == 0
        info = torch.where(singular & (info == 0), torch.full_like(info, k + 1), info)
        det = det * piv
        row = M[..., k, :] / torch.where(singular, torch.ones_like(piv), piv).unsqueeze(-1)
        factor = torch.where(rows == k, torch.zeros_like(M[..., :, k]), M[..., :, k])
        M = M - factor.unsqueeze(-1) * row.unsqueeze(-2)
        M = torch.where((rows == k).unsqueeze(-1), row.unsqueeze(-2).expand(M.shape), M)
    return M[..., :, n:], det, info


def _square(A, op):
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are {A.shape[-2]} by {A.shape[-1]} "
                           "matrices" if A.dim() >= 2 else f"{op}: The input tensor A must have at least 2 dimensions.")
    if not A.is_floating_point():
        raise RuntimeError(f"{op}: Expected a floating point tensor as input. Got {A.dtype}")


def _raise_if_singular(info, op):
    bad = torch.nonzero(info.reshape(-1)).reshape(-1)
    if bad.numel():
        first = int(bad[0])
        where = f"(Batch element {first}): " if info.dim() else ""
        raise torch.linalg.LinAlgError(
            f"{op}: {where}The solver failed because the input matrix is singular (diagonal element "
            f"{int(info.reshape(-1)[first])} of its LU factor is zero).")


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


def linalg_det(A):
    _square(A, "linalg.det")
    if A.shape[-1] == 0:  # 1, still a function of A for autograd (as torch's)
        return A.sum((-2, -1)) + 1
    return _eliminate(A, A[..., :, :0])[1]


_lib = torch.library.Library("aten", "IMPL")
for _name, _fn in (("linalg_solve_ex", linalg_solve_ex), ("linalg_solve", linalg_solve), ("linalg_inv_ex", linalg_inv_ex),
                   ("linalg_inv", linalg_inv), ("linalg_det", linalg_det)):
    _lib.impl(_name, _fn, "AutogradPrivateUse1")
