"""torch.linalg solve, inv, det, slogdet, cholesky, solve_triangular and cholesky_solve on tvk
(torchvk/aten/linalg.py): values and gradients against the CPU, batched and broadcast, singular
matrices as torch reports them."""
import functools

import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
from cpu_reference import grads_match

g = torch.Generator().manual_seed(0)
A = torch.randn(3, 5, 5, generator=g) + 3 * torch.eye(5)
A[1] = A[1][[2, 0, 1, 4, 3]]  # pivoting needed, odd permutation: the determinant's sign
B = torch.randn(3, 5, 2, generator=g)
_match = functools.partial(grads_match, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["batched", "broadcast", "vector", "right"])
def test_solve(case):
    if case == "batched":
        _match(torch.linalg.solve, A, B)
    elif case == "broadcast":
        _match(torch.linalg.solve, A[0], B)
    elif case == "vector":
        _match(torch.linalg.solve, A, B[..., 0])
    else:
        _match(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT)


def test_inv_and_det():
    _match(torch.linalg.inv, A)
    _match(torch.linalg.det, A)
    _match(torch.linalg.det, A[1])
    assert torch.linalg.det(A[1]).item() * torch.linalg.det(A[1].to("tvk")).item() > 0  # same sign
    empty = torch.zeros(2, 0, 0).to("tvk").requires_grad_()
    d = torch.linalg.det(empty)
    assert d.requires_grad and d.cpu().tolist() == [1.0, 1.0]


def test_singular_matrices():
    S = A.clone()
    S[2, :, 1] = S[2, :, 0]  # batch element 2 is singular
    with pytest.raises(torch.linalg.LinAlgError, match="Batch element 2"):
        torch.linalg.inv(S.to("tvk"))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.linalg.solve(S[2].to("tvk"), B[2].to("tvk"))
    _, info = torch.linalg.solve_ex(S.to("tvk"), B.to("tvk"))
    assert info.cpu().tolist()[:2] == [0, 0] and info.cpu()[2] > 0
    assert abs(torch.linalg.det(S[2].to("tvk")).item()) < 1e-4
    torch.testing.assert_close(torch.linalg.inv(A.to("tvk")).cpu(), torch.linalg.inv(A), rtol=1e-4, atol=1e-4)


def test_slogdet_and_logdet():
    _match(lambda a: torch.linalg.slogdet(a)[1], A)
    torch.testing.assert_close(torch.linalg.slogdet(A.to("tvk"))[0].cpu(), torch.linalg.slogdet(A)[0])
    P = A @ A.mT  # positive determinant
    _match(torch.logdet, P)
    assert torch.isnan(torch.logdet(A[1].to("tvk"))).item() == torch.isnan(torch.logdet(A[1])).item()


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(upper):
    P = A @ A.mT + torch.eye(5)
    _match(lambda a: torch.linalg.cholesky(a, upper=upper), P)
    N = P.clone()
    N[1] = -N[1]
    with pytest.raises(torch.linalg.LinAlgError, match="Batch element 1"):
        torch.linalg.cholesky(N.to("tvk"))
    assert torch.linalg.cholesky_ex(N.to("tvk")).info.cpu().tolist() == torch.linalg.cholesky_ex(N).info.tolist()


@pytest.mark.parametrize("upper,left,unit", [(False, True, False), (True, True, False), (True, False, True),
                                              (False, False, False)])
def test_solve_triangular(upper, left, unit):
    T = A.triu() if upper else A.tril()
    rhs = B if left else B.mT
    _match(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), T, rhs)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper):
    P = A @ A.mT + torch.eye(5)
    L = torch.linalg.cholesky(P, upper=upper)
    _match(lambda b, f: torch.cholesky_solve(b, f, upper=upper), B, L)
    _match(lambda f: torch.cholesky_inverse(f[0], upper=upper), L)
    _match(lambda p: torch.cholesky(p, upper=upper), P)
