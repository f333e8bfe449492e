"""The computations of the ``cones`` study (package notes): ``run(config, out)`` writes
the raw data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import framework as fw
from ..common.panels import panel_setup, softmax_blowup
from ..common.paper import flow, init_grid, paper_field, path_times, subsample, to_cone
from ..common.paper_euler import projected_euler
from .config import Config


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
