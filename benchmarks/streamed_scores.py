"""The weights-only structure scores streamed from the checkpoint against load + model_structure:
time and peak memory on the real checkpoints tpde ships with.

    python benchmarks/streamed_scores.py                 # MiniLM, SmolLM2-135M, Gemma-3-270M
    python benchmarks/streamed_scores.py --quick         # MiniLM only (make bench)
    python benchmarks/streamed_scores.py --models minilm smollm2

Per model, three fresh subprocesses (one thread each): ``checkpoint_size(path)`` (the
headers alone: what any reading of the checkpoint holds), ``weight_scores(path)``
(:func:`tpde.pretrained.weight_scores`: one block's attention tensors at a time, float64)
and ``model_structure(load(path))`` (the whole model in float32, load's default, its
tokenizer built, then the same scores). Peak memory: the process's high-water resident set
(``VmHWM``, reset through ``/proc/self/clear_refs`` after the imports and a warm-up on a
tiny field) minus the resident set at that point; a 2 ms sampler where the reset is not
available. Columns: the whole model in float32 and one block's attention tensors in float64
(:func:`tpde.pretrained.checkpoint_size`); seconds of the stream and of load +
model_structure (load's alone in brackets); peaks of the headers, the stream and load +
model_structure; the largest relative difference of the two's per-head scores (symmetry,
directionality, symmetry_residual, definite_residual, rope_residual).

Measured on the shared 2-core machine (one thread, load average 3–4 from other jobs),
2026-12-07 (reading the headers alone: 0.0–0.8 s):

| model | f32 MiB | attn MiB | stream s | load s | headers +MiB | stream +MiB | load +MiB | diff |
|---|---|---|---|---|---|---|---|---|
| MiniLM-L6 (safetensors) | 87 | 4.5 | 7.3 | 7.7 (0.2) | 1 | 60 | 146 | 0.0e+00 |
| SmolLM2-135M (Q4_1) | 513 | 6.8 | 84.7 | 75.1 (3.6) | 15 | 143 | 654 | 0.0e+00 |
| Gemma-3-270M (Q4_K_M) | 1023 | 12.5 | 127.2 | 89.1 (3.6) | 48 | 228 | 1723 | 0.0e+00 |

The scores are equal to the last bit (the same field of the same float64 numbers). Peak: the
stream holds 41% (MiniLM), 22% (SmolLM2) and 13% (Gemma-3) of what loading does, and its
peak does not grow with depth or vocabulary. Seconds: the projections dominate both ways
(Gemma-3: ~8 s a layer; a profile of layers 0–1 gives 16.0 s streamed and 16.2 s loaded),
load itself takes 0.2–3.6 s, so the difference between the two columns is the machine's
load (an earlier run at a lighter load: MiniLM 2.3 s against 2.1 s, SmolLM2 46 s against 54 s).

What the stream's peak holds besides one block's attention tensors: the headers (a GGUF
file's metadata, its vocabulary included), and the projection's work arrays, a few d × d
float64 matrices per head (V = W_O W_V and the structured mobility M_s kept for every head
of the block, A, A_s and M* one head at a time): about H·4·d²·8 bytes, 54 MiB for MiniLM's
12 heads at d = 384, 91 MiB for SmolLM2's 9 at d = 576. These grow as H·d², not with depth
or vocabulary: the stream's peak is flat in the number of layers while load's grows with the
model; at d = 8192 and H = 64 they would be ~130 GiB per block (the projection in factor
form, rank ≤ 2·d_h per head, is not done).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import torch
from _common import ROOT, print_table

import tpde.pretrained as pretrained
from tpde.pretrained import checkpoint_size

MODELS = {
    "minilm": ("MiniLM-L6 (safetensors)", "minilm_path"),
    "smollm2": ("SmolLM2-135M (Q4_1)", "smollm2_path"),
    "gemma3": ("Gemma-3-270M (Q4_K_M)", "gemma3_270m_path"),
}
SCORES = ("symmetry", "directionality", "symmetry_residual", "definite_residual", "rope_residual")

#: The child: imports, a warm-up, the peak reset, then one way of scoring; prints JSON.
CHILD = r"""
import json, sys, time
import torch
from tpde.fields import GroupedQueryAttention, RoPE, nearest_gradient_field
import tpde.pretrained as pretrained
sys.path.insert(0, sys.argv[3])
from _common import PeakRSS

def status(key):
    with open("/proc/self/status") as f:
        return int(f.read().split(key)[1].split()[0]) * 1024

w = torch.randn(8, 16, dtype=torch.float64)
nearest_gradient_field(GroupedQueryAttention(w, w, w, w.mT, 2, 2, position=RoPE(), causal=False))
path = getattr(pretrained, sys.argv[1])()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    base, sampler = status("VmRSS:"), None
except OSError:
    sampler = PeakRSS().__enter__()
start = time.perf_counter()
if sys.argv[2] == "headers":  # what any reading of the checkpoint holds
    size, loading = pretrained.checkpoint_size(path), 0.0
    result = pretrained.ModelStructure((), (), None)
elif sys.argv[2] == "stream":
    result, loading = pretrained.weight_scores(path), 0.0
else:
    model = pretrained.load(path)
    loading = time.perf_counter() - start
    result = pretrained.model_structure(model)
seconds = time.perf_counter() - start
if sampler is None:
    peak = status("VmHWM:") - base
else:
    sampler.__exit__(None, None, None)
    peak = sampler.extra
names = sys.argv[4].split(",") if result.reports else []
tables = {n: result.table(n).tolist() for n in names}
print(json.dumps({"seconds": seconds, "loading": loading, "peak": peak, "tables": tables}))
"""


def run(getter: str, how: str) -> dict:
    """One way of scoring in a fresh one-thread subprocess: its JSON record."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", CHILD, getter, how, str(ROOT / "benchmarks"), ",".join(SCORES)],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def largest_difference(a: dict, b: dict) -> float:
    """The largest relative difference of two runs' per-head scores (NaN entries skipped)."""
    worst = 0.0
    for name in SCORES:
        for row_a, row_b in zip(a[name], b[name], strict=True):
            for x, y in zip(row_a, row_b, strict=True):
                if not (math.isnan(x) and math.isnan(y)):
                    worst = max(worst, abs(x - y) / max(abs(y), 1e-300))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="MiniLM only")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    rows = []
    for key in ["minilm"] if args.quick else args.models:
        title, getter = MODELS[key]
        path = getattr(pretrained, getter)()
        size32, size64 = (checkpoint_size(path, dtype) for dtype in (torch.float32, torch.float64))
        runs = {how: run(getter, how) for how in ("headers", "stream", "load")}
        diff = largest_difference(runs["stream"]["tables"], runs["load"]["tables"])
        mib = 2.0**20
        rows.append({
            "model": title,
            "f32 MiB": f"{size32.total / mib:.0f}",
            "attn MiB": f"{max(size64.attention) / mib:.1f}",
            **{f"{how} s": f"{runs[how]['seconds']:.1f}" for how in ("stream", "load")},
            **{f"{how} +MiB": f"{r['peak'] / mib:.0f}" for how, r in runs.items()},
            "diff": f"{diff:.1e}",
        })  # fmt: skip
        rows[-1]["load s"] += f" ({runs['load']['loading']:.1f})"
        print(f"{key}: done", file=sys.stderr, flush=True)
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
