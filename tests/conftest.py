"""Test configuration: one torch thread, KeOps cache inside the checkout, shared helpers."""

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("KEOPS_CACHE_FOLDER", str(ROOT / "build" / "keops"))

# With two cores and the other one busy, multi-threaded small ops slow down 10-40x.
torch.set_num_threads(1)


@pytest.fixture
def generator():
    """A seeded CPU generator: every random draw in a test is reproducible."""
    return torch.Generator().manual_seed(20250131)


def random_spd(d, generator, dtype=torch.float64, batch=(), floor=0.1):
    """Random symmetric positive definite matrices (..., d, d) with eigenvalues >= floor."""
    g = torch.randn(*batch, d, d, generator=generator, dtype=dtype)
    return g @ g.mT / d + floor * torch.eye(d, dtype=dtype)


def keops_ok():
    from tpde._engines.keops import keops_status

    return keops_status()[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """KeOps cases run with ``make test-slow`` (marked ``slow`` here), except one.

    Each KeOps formula compiles at first use on a fresh machine (a clean clone has no
    cache): 16 s of CPU for one forward softmax formula, about 56 s for a first backward,
    10-40 s for each other formula, more than a minute each on a busy machine. The default
    suite keeps one forward formula against the dense engine (``keops_quick``: the KeOps
    route works here); the slow suite checks every variant's values and gradients. Runs
    first, so that ``-m 'not slow'`` deselects them.
    """
    for item in items:
        if item.get_closest_marker("keops") and not item.get_closest_marker("keops_quick"):
            item.add_marker(pytest.mark.slow)
        # pyproject's timeout (300 s) is the default suite's; slow tests get 1800 s unless
        # they set their own limit.
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(1800))
