"""Batched LU solves on a multi-threaded CPU (tpde._lu; pytorch/pytorch issue 142815).

torch 2.13's CPU kernels run a batch of large LU factorisations on several threads at once,
where MKL's DLASWP is not thread-safe: errors ("Pivots given to lu_solve …") or wrong numbers
(module notes of tpde._lu). tpde's wrappers run such a batch on one thread. Oracle: each
matrix solved alone (unbatched calls are not affected), float64, ≤ 1e-10 relative (the
matrices' condition numbers are below 1e3, so rounding is ~1e-13).
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

from tpde import _lu as lu

F64 = torch.float64


@pytest.fixture
def two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def _batch(b=6, n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(b, n, n, dtype=F64, generator=g) / n**0.5
    A = X @ X.mT + torch.eye(n, dtype=F64)  # SPD, eigenvalues in [1, ~5]
    return A, torch.randn(b, n, 3, dtype=F64, generator=g)


def _relative(x, y):
    return float((x - y).abs().max() / y.abs().max())


def test_batched_solves_equal_one_matrix_at_a_time_on_two_threads(two_threads):
    A, B = _batch()
    alone = torch.stack([torch.linalg.solve(a, b) for a, b in zip(A, B, strict=True)])
    assert _relative(lu.solve(A, B), alone) < 1e-10
    assert _relative(lu.solve(A, B[..., 0]), alone[..., 0]) < 1e-10
    assert _relative(lu.inv(A) @ B, alone) < 1e-10
    LU, pivots, info = lu.lu_factor_ex(A)
    assert int(info.abs().max()) == 0
    assert _relative(lu.lu_solve(LU, pivots, B), alone) < 1e-10
    assert torch.get_num_threads() == 2  # the caller's count restored


def test_recorded_batches_and_their_gradients_equal_one_matrix_at_a_time(two_threads):
    """Under autograd a batched call is solved matrix by matrix (its backward, a batched LU
    solve outside the guard, would race): values and gradients equal the unbatched ones
    (≤ 1e-10), for a matrix and a vector right-hand side, an inverse and a log-determinant."""
    A, B = _batch(b=3, n=40)
    functions = {  # (matrices, right-hand sides) → output
        "solve": lambda a, b: lu.solve(a, b),
        "vector": lambda a, b: lu.solve(a, b[..., 0]),
        "inv": lambda a, b: lu.inv(a),
        "logdet": lambda a, b: lu.logdet(a),
    }
    for function in functions.values():
        batched = A.clone().requires_grad_(True)
        out = function(batched, B)
        (grad,) = torch.autograd.grad(out.square().sum(), batched)
        for i in range(len(A)):
            alone = A[i].clone().requires_grad_(True)
            one = function(alone, B[i])
            (g,) = torch.autograd.grad(one.square().sum(), alone)
            assert _relative(out[i].detach(), one.detach()) < 1e-10
            assert _relative(grad[i], g) < 1e-10
    assert torch.get_num_threads() == 2


def test_the_thread_count_is_restored_when_torch_raises(two_threads):
    A, B = _batch(b=2, n=20)
    with pytest.raises(RuntimeError, match="Incompatible shapes of A and B"):
        lu.solve(A, B[:, :5])
    assert torch.get_num_threads() == 2


def test_no_module_calls_torchs_lu_kernels_directly():
    """Every LU-based call goes through tpde._lu (a new direct call would bring the race
    back on batched inputs)."""
    root = pathlib.Path(lu.__file__).parent
    kernels = (
        "linalg\\.(solve|solve_ex|inv|inv_ex|lu_factor|lu_factor_ex|lu_solve|lu|det|"
        "slogdet)|inverse|lu_solve|logdet|slogdet|det"
    )
    direct = re.compile(rf"torch\.({kernels})\(")
    found = [f"{path.relative_to(root)}:{i}"
             for path in root.rglob("*.py") if path.name != "_lu.py"
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if direct.search(line)]  # fmt: skip
    assert not found, f"call tpde._lu instead of torch's LU kernels at {found}"
