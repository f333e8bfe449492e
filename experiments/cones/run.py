"""The computations of the ``cones`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common.paper import flow, init_grid, paper_field, path_times, subsample, to_cone
from ..common.paper_euler import projected_euler
from .config import Config


# ---------------------------------------------------------------------- the paper's matrices
def legacy(seed: int) -> np.random.RandomState:
    """numpy's legacy generator: the stream of ``np.random.seed(seed)`` + ``np.random.*``."""
    return np.random.RandomState(seed)


def _redraw(seed: int, accept) -> tuple[np.ndarray, np.ndarray]:
    rng = legacy(seed)
    for _ in range(1000):
        Q, K = rng.randn(2, 2), rng.randn(2, 2)
        if accept(np.linalg.eigvalsh(K.T @ Q + Q.T @ K)):
            break
    return Q, K


def panel_setup(panel: str, config: Config | None = None) -> dict:
    """Q, K, V and, per variant, (step h, tol_low, tol_high, max_iter, heads); the grid."""
    if panel == "zero":
        rng = legacy(35)
        Q = rng.rand(2, 2)
        G = rng.randn(2, 2)
        QKV = (Q, -Q, G @ G.T)
        runs = {
            "softmax": (0.3, 1e-5, 1e3, 50_000, 1),
            "l2": (0.3, 1e-5, 1e3, 50_000, 1),
            "multihead": (0.3, 1e-5, 1e3, 50_000, 2),
            "sinkhorn": (0.5, 1e-5, 1e3, 50_000, 1),
        }
        grid = (10, 0.5)
    elif panel in ("line", "plane"):
        q = legacy(36).randn(1, 2)
        q = q / np.linalg.norm(q)
        QKV = (q, -q, np.eye(2))
        if panel == "line":
            runs = {"softmax": (0.5, 1e-4, 1e3, 50_000, 1), "l2": (0.5, 1e-4, 1e3, 50_000, 1)}
        else:
            runs = {"multihead": (0.5, 1e-4, 1e3, 50_000, 2)}
        grid = (10, 0.5)
    elif panel == "two_lines":
        Q, K = _redraw(36, lambda e: e[0] * e[1] < 0)
        QKV = (Q, K, legacy(32).randn(2, 2))
        runs = {"softmax": (0.01, 1e-7, 1e3, 50_000, 1), "l2": (0.01, 1e-7, 1e3, 50_000, 1)}
        grid = (config.two_lines_grid if config else 20, 1.0)
    elif panel == "blowup":
        Q, K = _redraw(33, lambda e: e[0] > 0)
        QKV = (Q, K, np.eye(2))
        runs = {
            "softmax": (0.01, 1e-4, 1e3, 100_000, 1),
            "multihead": (0.002, 1e-4, 1e3, 100_000, 2),
            "l2": (0.001, 1e-5, 1e4, 50_000, 1),
            "sinkhorn": (0.01, 1e-5, 1e4, 50_000, 1),
        }
        grid = (config.blowup_grid if config else 40, 1.0)
    elif panel == "initial":
        Q, K = _redraw(36, lambda e: e[0] * e[1] < 0)
        rng = legacy(35)
        rng.randn(8, 7)  # discarded, as in the authors' script
        QKV = (Q, K, rng.randn(2, 2))
        # The authors' script runs its "multi-head" panel with H = 1 (identical to softmax);
        # the panel shows H = 2, the multi-head field the caption names.
        runs = {
            "softmax": (0.003, 1e-4, 1e3, 50_000, 1),
            "l2": (0.002, 1e-4, 1e3, 50_000, 1),
            "multihead": (0.002, 1e-4, 1e3, 50_000, 2),
        }
        grid = (config.initial_grid if config else 30, 1.0)
    else:
        raise ValueError(f"unknown panel {panel!r}")
    return {"QKV": QKV, "runs": runs, "grid": grid}


# ---------------------------------------------------------------------- checks
def isotropic_angles(A: np.ndarray) -> np.ndarray:
    """Angles θ ∈ [0, π) of the two lines u = (cos θ, sin θ) with uᵀAu = 0 (A + Aᵀ indefinite)."""
    S = 0.5 * (A + A.T)
    # uᵀSu = S00 cos² + 2 S01 cos sin + S11 sin² = 0  ->  S11 t² + 2 S01 t + S00 = 0, t = tan θ
    roots = np.roots([S[1, 1], 2 * S[0, 1], S[0, 0]])
    return np.sort(np.mod(np.arctan(roots.real), np.pi))


def top_angle(S: np.ndarray) -> np.ndarray:
    """Angle in [0, π) of the top eigenvector of each 2 × 2 matrix (..., 2, 2)."""
    _, vecs = np.linalg.eigh(S)
    top = vecs[..., :, -1]
    return np.mod(np.arctan2(top[..., 1], top[..., 0]), np.pi)


def line_distance(theta: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """Angle (radians) from each θ to the nearest of ``lines`` (as lines: modulo π)."""
    gap = np.abs(theta[..., None] - lines)
    gap = np.minimum(gap, np.pi - gap)
    return gap.min(-1)


def anisotropy(S: np.ndarray) -> np.ndarray:
    evals = np.linalg.eigvalsh(S)
    return evals[..., -1] / np.maximum(evals.sum(-1), 1e-300)


def softmax_blowup(S0: np.ndarray, A: np.ndarray, threshold: float):
    """V = I softmax closed form (MATH.md §4 item 2): Σ(t) = (Σ₀⁻¹ − t(A + Aᵀ))⁻¹.

    Returns t* (blow-up time), the time where tr Σ(t) = threshold (bisection) and the
    angle of the blow-up direction (kernel of Σ₀⁻¹ − t*(A + Aᵀ)).
    """
    sym = A + A.T
    inv0 = np.linalg.inv(S0)
    evals, vecs = np.linalg.eigh(S0)
    root = (vecs * np.sqrt(evals)[..., None, :]) @ np.swapaxes(vecs, -1, -2)
    t_star = 1 / np.linalg.eigvalsh(root @ sym @ root)[..., -1]
    lo, hi = np.zeros_like(t_star), t_star.copy()
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        trace = np.trace(np.linalg.inv(inv0 - mid[:, None, None] * sym), axis1=-2, axis2=-1)
        big = trace > threshold
        hi, lo = np.where(big, mid, hi), np.where(big, lo, mid)
    _, kvecs = np.linalg.eigh(inv0 - t_star[:, None, None] * sym)
    kernel = kvecs[..., :, 0]
    return t_star, hi, np.mod(np.arctan2(kernel[..., 1], kernel[..., 0]), np.pi)


def _checks(panel, variant, setup, S0, res, second, closed, tight=None) -> dict:
    """Panel-specific measurements of one (panel, variant) flow."""
    Q, K, _ = setup["QKV"]
    A = K.T @ Q
    status, final = res.status, res.final
    out = {"status": dict(zip(*np.unique(status, return_counts=True), strict=True))}
    conv = status == "converged"
    if panel == "zero":
        out["max_final_trace"] = float(np.trace(final, axis1=1, axis2=2).max())
        angles = top_angle(final[conv])
        out["direction_spread_deg"] = float(np.degrees(np.ptp(angles))) if conv.any() else None
        out["median_anisotropy"] = float(np.median(anisotropy(final[conv]))) if conv.any() else None
    if panel == "line" and tight is not None:
        final = tight.final  # the same starts run to ‖Σ̇‖ < 1e-9: the limit itself
        q = setup["QKV"][0][0]
        w = np.array([-q[1], q[0]])
        limit = (
            np.einsum("i,j->ij", w, w)[None]
            / np.einsum("i,bij,j->b", w, np.linalg.inv(S0), w)[:, None, None]
        )
        err = np.linalg.norm(final - limit, axis=(1, 2)) / np.linalg.norm(limit, axis=(1, 2))
        out["limit_rel_error_median"], out["limit_rel_error_max"] = map(
            float, (np.median(err), err.max())
        )
    if panel == "plane":
        evals = np.linalg.eigvalsh(final)
        out["fraction_full_rank"] = float(np.mean(evals[:, 0] > 1e-3 * evals[:, 1]))
        out["median_min_eigenvalue"] = float(np.median(evals[:, 0]))
    if panel in ("two_lines", "initial") and conv.any():
        lines = isotropic_angles(A)
        theta = top_angle(final[conv])
        gaps = line_distance(theta, lines)
        near = np.argmin(line_distance(theta[:, None], lines[:, None]), -1)
        out["isotropic_lines_deg"] = np.degrees(lines).tolist()
        out["converged_rank_one"] = float(np.mean(anisotropy(final[conv]) > 0.99))
        out["max_angle_to_isotropic_deg"] = float(np.degrees(gaps.max()))
        out["per_line"] = np.bincount(near, minlength=2).tolist()
    blow = status == "blow_up"
    if panel in ("blowup", "initial") and blow.any():
        out["blowup_direction_deg"] = np.degrees(
            np.percentile(top_angle(final[blow]), [0, 50, 100])
        ).tolist()
        if second is not None:
            picks, again = second
            t1, t2 = res.event_time[picks], again.event_time
            ratio = np.where(again.status == "blow_up", (t2 - t1) / t1, np.inf)
            out["finite_time_ratio_median"] = float(np.median(ratio))
            out["finite_time_fraction"] = float(np.mean(ratio < 0.05))
    if panel == "blowup" and variant == "softmax":
        t_star, t_hit, direction = closed
        out["t_star_range"] = [float(t_star.min()), float(t_star.max())]
        ok = blow
        out["event_time_abs_error_max"] = float(np.abs(res.event_time[ok] - t_hit[ok]).max())
        out["event_before_t_star"] = bool(np.all(res.event_time[ok] <= t_star[ok]))
        out["direction_error_deg_max"] = float(
            np.degrees(line_distance(top_angle(final[ok]), direction[ok][:, None]).max())
        )
    return out


# ---------------------------------------------------------------------- run
def _paper_subset(config, n: int) -> np.ndarray:
    if config.paper_starts == -1:
        return np.arange(n)
    return subsample(n, config.paper_starts) if config.paper_starts > 0 else np.arange(0)


def _ratio(value: float) -> str:
    """A speed-up as text: whole numbers from 10×, two digits below (0.31×)."""
    return f"{value:.0f}×" if value >= 10 else f"{value:.2g}×"


def run(config: Config, out: Path) -> None:
    started = time.perf_counter()
    arrays, results = {}, {}
    jobs = [(p, v) for p in config.panels for v in panel_setup(p)["runs"]]
    for panel, variant in fw.progress(jobs, "cones"):
        setup = panel_setup(panel, config)
        h, tol_low, tol_high, max_iter, heads = setup["runs"][variant]
        S0 = init_grid(*setup["grid"])
        field = paper_field(variant, *setup["QKV"], heads=heads)
        common = {
            "horizon": max_iter * h,
            "first_step": h,
            "rtol": config.rtol,
            "atol": config.atol,
        }
        clock = time.perf_counter()
        save = path_times(h, common["horizon"], 2 * config.path_points)
        res = flow(field, S0, tol_low=tol_low, tol_high=tol_high, save=save, **common)
        seconds = time.perf_counter() - clock
        second = None
        blown = np.flatnonzero(res.status == "blow_up")
        if panel in ("blowup", "initial") and len(blown):
            second = blown[subsample(len(blown), config.finite_time_starts)]
            high = tol_high * config.finite_time_factor
            again = flow(field, S0[second], tol_low=tol_low, tol_high=high, **common)
            second = (second, again)
            arrays[f"{panel}__{variant}__second_index"] = second[0]
            arrays[f"{panel}__{variant}__second_time"] = again.event_time
        key = f"{panel}__{variant}"
        index = subsample(len(res.times), config.path_points)
        arrays[key + "__path"] = to_cone(res.covs[index]).astype(np.float32)
        arrays[key + "__status"] = res.status.astype("U12")
        arrays[key + "__event_time"] = res.event_time
        arrays[key + "__S0"] = S0
        arrays[key + "__final"] = res.final
        closed = None
        if panel == "blowup" and variant == "softmax":
            Q, K, _ = setup["QKV"]
            closed = softmax_blowup(S0, K.T @ Q / np.sqrt(2), tol_high)
            arrays[key + "__t_star"], arrays[key + "__t_exact"] = closed[0], closed[1]
        tight = None
        if panel == "line":
            tight = flow(field, S0, tol_low=1e-9, tol_high=tol_high, **{**common, "horizon": 1e7})
        checks = _checks(panel, variant, setup, S0, res, second, closed, tight)
        checks.update(n_starts=len(S0), seconds=seconds, n_steps=res.stats["n_steps"])
        checks["paper"] = _compare_paper(config, setup, variant, S0, res, arrays, key)
        results[key] = checks
    fw.save(out, config, arrays, results, started)


def _compare_paper(config, setup, variant, S0, res, arrays, key) -> dict:
    """Re-run a subset of starts with the authors' projected-Euler loop and compare."""
    picks = _paper_subset(config, len(S0))
    if len(picks) == 0:
        return {}
    h, tol_low, tol_high, max_iter, heads = setup["runs"][variant]
    runs, clock = [], time.perf_counter()
    for i in picks:
        runs.append(
            projected_euler(
                S0[i],
                *setup["QKV"],
                variant=variant,
                heads=heads,
                step=h,
                tol_low=tol_low,
                tol_high=tol_high,
                max_iter=max_iter,
                keep_path=True,
            )
        )
    seconds = time.perf_counter() - clock
    status = np.array([r.status for r in runs])
    final = np.array([r.final for r in runs])
    same = status == res.status[picks]
    norm = lambda S: S / np.trace(S, axis1=-2, axis2=-1)[..., None, None]  # noqa: E731
    gap = np.linalg.norm(norm(final) - norm(res.final[picks]), axis=(1, 2))
    for j, r in enumerate(runs):
        index = subsample(len(r.path), config.path_points)
        arrays[f"{key}__paper{j}"] = to_cone(r.path[index]).astype(np.float32)
    arrays[key + "__paper_index"] = picks
    arrays[key + "__paper_status"] = status.astype("U12")
    times = np.array([r.time for r in runs])
    both = same & (status != "completed")
    rel = np.abs(times[both] - res.event_time[picks][both]) / np.maximum(times[both], 1e-12)
    return {
        "starts": len(picks),
        "status_agreement": float(same.mean()),
        "normalized_final_gap_max": float(gap[same].max()) if same.any() else None,
        "event_time_rel_gap_median": float(np.median(rel)) if both.any() else None,
        "seconds": seconds,
        "seconds_per_start": seconds / len(picks),
    }
