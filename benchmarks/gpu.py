"""Softmax, L2 and Sinkhorn fields on a CUDA device: SDPA and KeOps against dense torch.

    python benchmarks/gpu.py             # n = 10⁴, 10⁵, 10⁶; d = 16, 64
    python benchmarks/gpu.py --quick     # n = 10⁴, 10⁵; d = 16
    python benchmarks/gpu.py --dry-run   # tiny sizes on the CPU, no KeOps: checks the script

Float32 clouds of n standard normal points (the fields of benchmarks/fields.py). Each cell
is one velocity call: one warm-up run (KeOps compiles its formulas there, cached under
build/keops), then the median of up to 3 runs, each closed by torch.cuda.synchronize().
Columns: seconds; GPU MB, the peak of torch.cuda.max_memory_allocated during the warm-up
above what was allocated before (KeOps' own buffers are not counted; an SDPA row of
O(n²) MB means torch fell back to its math kernel); rel.err, max|out − ref| / max|ref|
against dense torch, or against SDPA (then KeOps) where dense was not run; ×dense and
×sdpa, time ratios in the same run. Dense runs for n ≤ 10⁵ when two n × n float32 tensors
fit in free memory (an OOM is reported as such); any engine is skipped when its time,
extrapolated quadratically from the previous n, would pass --budget seconds, and every cell
once --deadline has passed (default 420 s, so that a run fits a 10-minute slot; on a fresh
machine KeOps compiles each formula, ~10 s, inside the warm-ups). Rows print as they are
measured, so a run cut short still leaves its table. Sinkhorn's log-sum-
exp iterations have no SDPA form on CUDA (the flash kernel with log-normaliser is the CPU
one): its "sdpa" row reads n/a, and "auto" shows what the engine table does instead.

Without a CUDA device (and without --dry-run) the script prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch
from _common import print_header, print_row  # also points KEOPS_CACHE_FOLDER to build/keops
from fields import l2_field, sinkhorn_field, softmax_field

from tpde._engines.keops import keops_status
from tpde.fields import InnerSolves
from tpde.measures import Empirical

FIELD_FACTORIES = {"softmax": softmax_field, "l2": l2_field, "sinkhorn": sinkhorn_field}
ENGINES = ("dense", "sdpa", "keops", "auto")
DENSE_MAX_N = 100_000
COLUMNS = ["variant", "d", "n", "engine", "s", "GPU MB", "rel.err", "×dense", "×sdpa", "iters"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(call, device: torch.device, budget_s: float, repeat: int = 3):
    """(median seconds, peak extra CUDA bytes of the warm-up or None, output) of ``call()``."""
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    out = call()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else None
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = call()
        _sync(device)
        times.append(time.perf_counter() - start)
        if times[-1] * repeat > budget_s:
            break
    return statistics.median(times), peak, out


def dense_fits(n: int, device: torch.device) -> bool:
    """Dense holds at least two n × n float32 tensors (scores, then weights)."""
    if n > DENSE_MAX_N:
        return False
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else float("inf")
    return 2 * 4 * n * n < 0.9 * free


def run_cell(field, cloud, engine: str, device: torch.device, budget_s: float) -> dict:
    """One velocity call timed; failures become a short note in the "s" column."""
    info = InnerSolves()
    try:
        with torch.no_grad():
            seconds, peak, out = measure(
                lambda: field.velocity(cloud, engine=engine, info=info), device, budget_s
            )
    except ValueError as err:  # the engine does not express this variant on this device
        print(f"{engine}: {err}", file=sys.stderr)
        return {"s": "n/a"}
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"s": "OOM"}
    except Exception as err:  # reported in the table: one failing cell must not end the run
        print(f"{engine}: {type(err).__name__}: {err}", file=sys.stderr)
        return {"s": f"error ({type(err).__name__})"}
    row = {"s": seconds, "out": out}
    if peak is not None:
        row["GPU MB"] = peak / 2**20
    if info.last is not None:  # Sinkhorn's scalings report into the InnerSolves collector
        row["iters"] = info.last.iterations
    return row


def add_ratios(cells: dict) -> None:
    """rel.err against dense (else SDPA, else KeOps) and time ratios, within one (variant, d, n)."""
    timed = {e: c for e, c in cells.items() if isinstance(c["s"], float)}
    reference = next((timed[e]["out"] for e in ("dense", "sdpa", "keops") if e in timed), None)
    for cell in timed.values():
        out = cell.pop("out")
        if reference is not None:
            cell["rel.err"] = float((out - reference).abs().max() / reference.abs().max())
        for column, base in (("×dense", "dense"), ("×sdpa", "sdpa")):
            if base in timed:
                cell[column] = cell["s"] / timed[base]["s"]


def skip_reason(engine: str, n: int, last: dict, device, budget_s: float, deadline: float):
    """Why ``engine`` is not run at this n (None: run it); ``last``: engine -> (s, n) before."""
    seconds, n_last = last.get(engine, (0.0, n))
    if engine == "dense" and not dense_fits(n, device):
        return "skip (memory)"
    if seconds == math.inf:
        return "skip (failed at a smaller n)"
    if seconds * (n / n_last) ** 2 > budget_s:
        return "skip (budget)"
    if time.monotonic() > deadline:
        return "skip (deadline)"
    return None


def run(variants, sizes, dims, engines, device, budget_s: float, deadline: float) -> None:
    keops_ok, reason = keops_status() if "keops" in engines else (False, "not asked for")
    if not keops_ok:
        print(f"KeOps skipped: {reason}")
        engines = tuple(e for e in engines if e != "keops")
    print_header(COLUMNS)
    for name in variants:
        for d in dims:
            generator = torch.Generator().manual_seed(0)
            field = FIELD_FACTORIES[name](d, generator)
            last = {}  # engine -> (seconds, n) at the previous size; inf after OOM or error
            for n in sizes:
                cloud = Empirical(torch.randn(n, d, generator=generator).to(device))
                cells = {}
                for engine in engines:
                    why = skip_reason(engine, n, last, device, budget_s, deadline)
                    if why is not None:
                        cells[engine] = {"s": why}
                        continue
                    cells[engine] = run_cell(field, cloud, engine, device, budget_s)
                    seconds = cells[engine]["s"]
                    if seconds != "n/a":
                        last[engine] = (seconds if isinstance(seconds, float) else math.inf, n)
                add_ratios(cells)
                for engine, cell in cells.items():
                    print_row({"variant": name, "d": d, "n": n, "engine": engine, **cell}, COLUMNS)
                del cloud, cells
                if device.type == "cuda":
                    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="n = 10⁴, 10⁵; d = 16")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--variants", nargs="*", default=list(FIELD_FACTORIES))
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per call")
    parser.add_argument("--deadline", type=float, default=420.0, help="seconds for the run")
    args = parser.parse_args()
    engines = ENGINES
    if args.dry_run:
        device, sizes, dims = torch.device("cpu"), [300, 600], [4]
        engines = tuple(e for e in ENGINES if e != "keops")
    elif not torch.cuda.is_available():
        print("no CUDA device: nothing to time")
        return
    else:
        device = torch.device("cuda")
        sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
        dims = [16] if args.quick else [16, 64]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    print(f"{name}, torch {torch.__version__}, float32")
    deadline = time.monotonic() + args.deadline
    run(args.variants, sizes, dims, engines, device, args.budget, deadline)


if __name__ == "__main__":
    main()
