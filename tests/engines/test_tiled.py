"""The tiled kernel-sum engine on several tiles and several threads, against dense.

The field tests (test_variant_engines_a.py) run it on one tile and one thread (the suite
runs torch single-threaded); here the tiles are made small, so that rows and keys are both
cut and key-side gradients are added across threads.
"""

import pytest
import torch

import tpde._engines.tiled as tiled
from tpde._engines.torch_engines import kernel_sum_dense

F64 = torch.float64


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 6 keys × 4 rows (ragged at the edges) on 3 threads."""
    monkeypatch.setattr(tiled, "TILE", 24)
    monkeypatch.setattr(tiled, "TILE_KEYS", 6)
    monkeypatch.setattr(tiled, "_workers", lambda q, m, stripes: 3)


def _draw(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=F64)


@pytest.mark.parametrize("kernel", ["sigmoid", "linear"])
@pytest.mark.parametrize("needs", ["qkvb", "q", "k", "v", "b"])
def test_tiles_and_threads_match_dense(small_tiles, kernel, needs, generator):
    # Batch of 2, n = 23 queries (6 stripes, the last ragged), m = 15 keys (3 tiles, ragged);
    # only the inputs in `needs` require gradients, so each backward branch runs alone.
    q, k = _draw(generator, 2, 23, 3), _draw(generator, 2, 15, 3)
    v, bias = _draw(generator, 2, 15, 4), _draw(generator, 2, 15)
    inputs = dict(zip("qkvb", (q, k, v, bias), strict=True))
    wanted = [inputs[name].requires_grad_() for name in needs]
    probe = _draw(generator, 2, 23, 4)
    threads = torch.get_num_threads()

    def run(engine):
        out = engine(q, k, v, bias, kernel)
        return out.detach(), torch.autograd.grad((out * probe).sum(), wanted)

    out, grads = run(tiled.kernel_sum_tiled)
    ref, ref_grads = run(kernel_sum_dense)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for name, g, g_ref in zip(needs, grads, ref_grads, strict=True):
        torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-12, msg=f"gradient in {name}")
    assert torch.get_num_threads() == threads  # the threads' settings do not leak


def test_large_scores_stay_finite(small_tiles, generator):
    # σ in place (torch's sigmoid_) and σ' = σ − σ² stay finite where e^{−s} overflows.
    q = (300 * _draw(generator, 7, 3)).requires_grad_()
    k, v = _draw(generator, 9, 3), _draw(generator, 9, 2)
    assert float((q.detach() @ k.T).abs().max()) > 710  # e^{710} overflows float64
    out = tiled.kernel_sum_tiled(q, k, v)
    (grad,) = torch.autograd.grad(out.sum(), q)
    ref = kernel_sum_dense(q, k, v)
    (grad_ref,) = torch.autograd.grad(ref.sum(), q)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)


def test_run_threads_shares_the_jobs_and_reraises():
    seen = []

    def work(jobs):
        mine = list(jobs)
        seen.extend(mine)
        return len(mine)

    counts = tiled.run_threads(work, 50, workers=3)
    assert sorted(seen) == list(range(50)) and sum(counts) == 50 and len(counts) == 3

    def fail(jobs):
        raise ArithmeticError("tile 0 failed")

    with pytest.raises(ArithmeticError, match="tile 0 failed"):
        tiled.run_threads(fail, 5, workers=2)
