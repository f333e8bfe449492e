r"""
A parameter sweep on Dask
=========================

A sweep is a grid of parameter sets, each run as one task on Dask distributed: in this
process by default (a ``LocalCluster`` with one in-process worker), on N local worker
processes, or on a cluster (``tpde sweep sweep.json --scheduler tcp://host:port``). Each
task's result is written as soon as it finishes, so an interrupted sweep resumes without
redoing finished tasks, and ``table.csv`` merges them in grid order
(:mod:`tpde.experiments.sweep`).

The study ``"blowup"`` draws random Q, K, V and Σ₀ and integrates each Gaussian ODE with
the paper's rules: the fractions that blow up, converge or do neither, as the value
matrix V is scaled, for softmax and L2 attention.
"""

import csv
import os
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

from tpde.experiments.sweep import run_sweep

SMALL = os.environ.get("TPDE_EXAMPLE_SIZE") == "small"  # the test suite runs a small size

# %%
# The sweep
# ---------
# The same dictionary can be written to a JSON file for ``tpde sweep``.

spec = {
    "study": "blowup",
    "grid": {"variant": ["softmax", "l2"], "value_scale": [0.25, 1.0, 4.0]},
    "fixed": {"samples": 8 if SMALL else 64, "horizon": 10.0},
    "seeds": 1 if SMALL else 2,
}
out = Path(tempfile.mkdtemp()) / "blowup"
table = run_sweep(spec, out, progress=False)  # in-process Dask cluster
with open(table) as handle:
    rows = list(csv.DictReader(handle))
print(f"{len(rows)} tasks; columns: {', '.join(rows[0])}")

# %%
# Rerunning is free: every task is on disk
# ----------------------------------------

again = run_sweep(spec, out, progress=False)
print("second run read", len(list((out / "tasks").iterdir())), "finished tasks; table", again.name)

# %%
# The picture
# -----------
# Mean over seeds of the blow-up fraction against the scale of V.

fig, ax = plt.subplots(figsize=(6, 4))
for i, variant in enumerate(spec["grid"]["variant"]):
    scales = spec["grid"]["value_scale"]
    fractions = [
        sum(
            float(r["blow_up_fraction"])
            for r in rows
            if r["variant"] == variant and float(r["value_scale"]) == s
        )
        / spec["seeds"]
        for s in scales
    ]
    ax.semilogx(scales, fractions, "o-", color=f"C{i}", label=variant)
ax.set_xlabel("value scale")
ax.set_ylabel("fraction of random settings that blow up")
ax.set_title("finite-time blow-up: softmax does, L2 does not")
ax.legend()
fig.tight_layout()
plt.show()
