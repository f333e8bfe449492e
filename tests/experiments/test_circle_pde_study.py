"""The circle-pde study's helpers: cluster counts and plateaus."""

import math

import numpy as np
import torch

from tpde.experiments.circle_pde import clusters, plateaus


def on_circle(angles):
    angles = torch.as_tensor(angles, dtype=torch.float64)
    return torch.stack([angles.cos(), angles.sin()], -1)


def test_clusters_counts_tight_groups_across_the_seam():
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([0.0, 2.0, 4.0]).repeat_interleave(100)
    angles = centres + 0.01 * torch.randn(300, generator=g, dtype=torch.float64)
    assert clusters(on_circle(angles), gap=0.05, min_share=0.01) == 3
    assert clusters(on_circle(angles + math.pi), gap=0.05, min_share=0.01) == 3  # at the seam


def test_spread_cloud_has_no_cluster():
    angles = torch.arange(1000, dtype=torch.float64) * 2 * math.pi / 1000
    assert clusters(on_circle(angles), gap=0.05, min_share=0.01) == 0


def test_plateaus_runs_of_one_count():
    times = np.arange(10.0)
    counts = np.array([0, 0, 3, 3, 3, 3, 2, 2, 1, 1])
    assert plateaus(times, counts, 2.0) == [(3, 2.0, 3.0)]
    assert plateaus(times, counts, 1.0) == [
        (0, 0.0, 1.0),
        (3, 2.0, 3.0),
        (2, 6.0, 1.0),
        (1, 8.0, 1.0),
    ]
