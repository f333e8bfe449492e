"""The ``ranks`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from tpde.flows import METHODS

from .. import framework as fw
from ..common.rank_protocol import PAPER_DIMS

NAME = "ranks"
ORDER = 2  # place in ``tpde run`` and in the report
TITLE = "rank histograms, d ∈ {3, 4, 5}"

#: MATH.md §6: the authors' code re-run (V = I).
TABLE = {
    ("softmax", "identity"): {
        3: {0: 3, 1: 48, 2: 49},
        4: {0: 11, 1: 47, 2: 42},
        5: {1: 5, 2: 54, 3: 41},
    },
    ("l2", "identity"): {3: {1: 32, 2: 68}, 4: {1: 31, 2: 69}, 5: {2: 46, 3: 54}},
}


@dataclass(frozen=True)
class Config:
    """Rows (variant × value) and sizes; the paper's seeds and stopping rules."""

    variants: tuple[str, ...] = ("softmax", "l2")
    values: tuple[str, ...] = ("identity", "random")
    dims: tuple[int, ...] = PAPER_DIMS
    runs: int = 100  # converged runs per d (the paper's 100)
    q_seed: int = 40
    init_seed: int = 41
    rank_tol: float = 0.1
    rtol: float = 1e-5  # Dormand–Prince tolerance: the V = I counts are identical at 1e-4…1e-6
    # The method per value of V. The V = GᵀG flows are stiff (module notes): dopri5's step
    # is bounded by stability there, the L-stable Rosenbrock method's by accuracy only.
    method_identity: str = "dopri5"
    method_random: str = "rodas4"
    tight_rtol: float = 1e-8  # V = GᵀG: the records re-run at this tolerance (converged)
    subset_refine: tuple[int, ...] = (10, 30)  # V = GᵀG: the loop also at h / r …
    refine_runs: int = 5  # … on this many converged records per d
    paper_runs: int = 10  # pairs per (row, d) re-run with the paper's loop on the same matrices
    paper_full: bool = True  # run the authors' whole protocol with their loop (minutes)
    refine: int = 5  # also run it with h / refine (max_iter × refine) on the softmax V = I
    refine_dims: tuple[int, ...] = (3,)  # rows of these d: Euler's counts → the ODE's (0: off)

    def check(self) -> None:
        fw.check_choices("variants", self.variants, ("softmax", "l2"))
        fw.check_choices("values", self.values, ("identity", "random"))
        if not self.dims or any(d not in PAPER_DIMS for d in self.dims):
            raise ValueError(f"dims must be among {PAPER_DIMS} (the paper's step sizes).")
        if self.refine < 0 or any(d not in PAPER_DIMS for d in self.refine_dims):
            raise ValueError("refine must be >= 0 and refine_dims among (3, 4, 5).")
        if self.runs < 1 or self.paper_runs < 0 or self.rtol <= 0 or self.rank_tol <= 0:
            raise ValueError("runs must be >= 1, paper_runs >= 0, rtol and rank_tol > 0.")
        fw.check_choices("method_identity", self.method_identity, tuple(METHODS))
        fw.check_choices("method_random", self.method_random, tuple(METHODS))
        if self.tight_rtol <= 0 or any(r < 2 for r in self.subset_refine):
            raise ValueError("tight_rtol must be > 0 and every subset_refine >= 2.")
        if self.refine_runs < 0:
            raise ValueError("refine_runs must be >= 0.")

    def memory_bytes(self) -> int:
        """float64 batches of covariances (runs × d²) and the Jacobians of the stiff method
        (runs × (d + d(d+1)/2)²), ~10 copies each, for the largest d."""
        d = max(self.dims)
        n = d + d * (d + 1) // 2
        return 8 * 10 * self.runs * (d * d + n * n)

    def method(self, value: str) -> str:
        """The time-stepping method of the rows with this value of V."""
        return self.method_identity if value == "identity" else self.method_random


#: --quick: the V = I rows (the ones MATH.md tabulates). The V = GᵀG rows are stiff (fast
#: modes ~ ‖V‖‖A‖‖Σ‖ force explicit steps of the size of the paper's own h over horizons
#: of 10³–10⁴) and take minutes.
QUICK = {"values": "identity", "paper_runs": "3", "refine": "0"}
