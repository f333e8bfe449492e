"""The weights-only structure scores streamed from the checkpoint against load + model_structure:
time and peak memory on the real checkpoints tpde ships with.

    python benchmarks/streamed_scores.py                 # MiniLM, SmolLM2-135M, Gemma-3-270M
    python benchmarks/streamed_scores.py --quick         # MiniLM only (make bench)
    python benchmarks/streamed_scores.py --models minilm smollm2
    python benchmarks/streamed_scores.py --models gemma3 --threads 2 --stream-only
    python benchmarks/streamed_scores.py --models gemma3 --stream-only --dtype float32

Per model, three fresh subprocesses (``--threads`` threads each, default one):
``checkpoint_size(path)`` (the headers alone: what any reading of the checkpoint holds),
``weight_scores(path)`` (:func:`tpde.pretrained.weight_scores`: one block's attention tensors
at a time, float64; ``--dtype float32``: its float32 working precision) and
``model_structure(load(path))`` (the whole model in float32, load's default, its tokenizer
built, then the same scores). Peak memory: the process's high-water
resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` after the imports and a
warm-up on a tiny field) minus the resident set at that point; a 2 ms sampler where the reset
is not available. Columns: the whole model in float32, one layer (the largest stored block)
and its attention tensors in float64, in MiB (:func:`tpde.pretrained.checkpoint_size`); seconds of
the stream and of load + model_structure (load's alone in brackets); peaks of the headers,
the stream and load + model_structure; the stream's CPU seconds (every thread's); the
largest relative difference of the two's per-head scores (symmetry, directionality,
symmetry_residual, definite_residual, rope_residual). ``--stream-only`` skips load +
model_structure (its columns and the difference then read nan).

Measured on the shared 2-core machine, one thread, 2026-12-07 14:22–14:27 UTC (load average
≈ 10 from other jobs: seconds are several times an idle core's), with the projection in
factor form (MATH.md §12):

| model | f32 | layer | attn | stream s | load s | headers +MiB | stream +MiB | load +MiB | diff |
|---|---|---|---|---|---|---|---|---|---|
| MiniLM-L6 (safetensors) | 87 | 13.5 | 4.5 | 2.4 | 4.9 (0.5) | 1 | 26 | 125 | 0.0e+00 |
| SmolLM2-135M (Q4_1) | 513 | 27.0 | 6.8 | 48.4 | 34.4 (3.9) | 16 | 77 | 653 | 0.0e+00 |
| Gemma-3-270M (Q4_K_M) | 1023 | 42.5 | 12.5 | 51.3 | 64.0 (14.5) | 49 | 181 | 1723 | 0.0e+00 |

The scores are equal to the last bit (the same field of the same float64 numbers).

Before and after the factor form, the stream alone (this benchmark's child, one thread), the
two runs of each model back to back, 14:41–14:47 UTC (load average 6–9): MiniLM 5.2 → 1.5 s,
SmolLM2 73.2 → 22.4 s, Gemma-3 134.1 → 20.4 s; peaks +50 → +27, +127 → +78, +223 → +172 MiB
(14:02–14:17, load 10–14: 8.9 → 2.8, 139.8 → 34.2, 427.6 → 71.4 s). Two threads
(``--threads 2``) on this busy machine measure the threads waiting for each other, not the
code: MiniLM 103.1 → 65.3 s (14:29–14:31); time them on an idle machine.

Where the seconds go (Gemma-3-270M, CPU milliseconds per head on one thread, same process,
17:00 UTC, load ≈ 9): the projection's LAPACK calls — A_s's eigendecomposition (640 × 640,
rank 512: ≈ 50–60), M̃'s eigenvalues (512: 15), the bracket's eigendecomposition (640, rank
512: 47–55) and a 512 solve (7) — take ≈ 120 of ≈ 205; the products (A, Ṽ, the clip, the
RoPE rows and Grams, Saponati's W) ≈ 60, the RoPE offset norms ≈ 10 (their 14 rotation
matrices and pair forms, ≈ 15 more, now computed once per encoding and width). The header,
without the vocabulary, 0.1 s; reading and dequantising a block, hundredths. So the floor on one
core is ≈ 72 × 0.2 s ≈ 15 CPU s, and the two cores split the heads: the 5 s of issue 33
needs the eigendecompositions cut, and the two exact reductions tried were not faster here
[derived, tested against the d × d form to 7e-13 on 40 seeds × 8 shapes, then reverted]:
(a) A_s in the 2d_h = 512 span of W_Qᵀ, W_Kᵀ (its complement from a complete QR): QR 21–27
+ eigh(512) 34–37 + products against eigh(640) 50–60: 81 against 61 ms; (b) the bracket
K = G M̃ Gᵀ, G = [I; (M̃⁻¹Cᵀ)ᵀ] (M̃ invertible), from one 512 eigenproblem of R M̃ Rᵀ
(G = QR; a Cholesky of GᵀG squares cond(G) ≈ 10⁴ and moved the drift by 2.5e-12) or of
S M̃ S (S = (GᵀG)^{1/2} from the SVD of M̃⁻¹Cᵀ): 99 and 58 ms against 54–66 ms for the
640 one, whose rank-512 matrix LAPACK's divide and conquer deflates (47 ms against 61 for a
random 640). scipy's OpenBLAS syevd took ≈ 80 % of torch's MKL one (not used: other
numbers than main's, and OpenBLAS's own threads inside the workers).

Threads (this change): the heads of a block are projected one per torch thread
(``nearest_gradient_field``, ``run_threads``: each head single-threaded, so the scores are
those of one thread to the last bit — 0.0 difference on all 72 heads against main's one
thread), the rest of the report on the calling thread alone. Interleaved runs of
``weight_scores`` on Gemma-3-270M, main (MKL's threads inside each operation) against this
branch, 17:36–17:46 UTC, load average ≈ 10 (wall seconds meaningless; CPU seconds of the
process): one thread main 17.7 CPU s (46.3 s wall), branch 17.1 (49.0); two threads main
166 CPU s (425.8 s wall: MKL's OpenMP threads spinning against the other jobs), branch 16.3
(33.2 s wall); this benchmark, ``--models gemma3 --stream-only``, 17:48–17:50 UTC, load ≈ 9:

| threads | stream s | stream CPU s | headers +MiB | stream +MiB |
|---|---|---|---|---|
| 1 | 37.1 | 18.1 | 11 | 140 |
| 2 | 34.6 | 16.8 | 11 | 210 |

(two threads of ≈ 9 runnable on two cores get no more wall time than one). On the idle
machine (load 1.2, 18:05 UTC, merged main): one thread 15.6 s (15.6 CPU s, +124 MiB, headers
+9), two threads 10.5 s (19.1 CPU s, +195 MiB), not the 5 s asked; main before it measured
15.4 s on one idle thread and 9.3 s on two (LAPACK's own threads: faster when idle, 425.8 s
wall at load ≈ 10 where the workers took 33.2 s). Again at load 3–4, 18:00–18:02 UTC
(the other core busy with other jobs): main one thread 17.2 s wall, 15.9 CPU s, +164 MiB;
branch one thread 15.2 s, 14.7 CPU s, +129 MiB; branch two threads 15.9 s, 16.9 CPU s,
+198 MiB; main two threads 23.5 s, 33.2 CPU s, +158 MiB. Projections narrower than
``PARALLEL_WIDTH`` = 512 (SmolLM2: r = 256, MiniLM: 128) run in turn with torch on one
thread: on workers their many small operations contend for the GIL (SmolLM2 11.8 CPU s
against 9.2 on one thread, MiniLM 1.4 against 0.8), and inside each operation on two
OpenMP threads, as main runs them, SmolLM2 took 52 CPU s (69.9 s wall) against 10.7
(15.6 s) now, 17:57–18:00 UTC, load 4–7; scores equal to main's to the last bit.

Memory: the stream's peak holds the headers (+11 MiB for Gemma-3 now that the vocabulary is
left unread, +49 MiB before), one block's float64 attention tensors and their reading, the
kept bases of the block's heads (d × r and r × n per head) and the work arrays of the heads
being projected, ≈ 8.5 r × r float64 matrices each (27.4 MiB at r = d = 640, 33.7 before
A and A_s were dropped early; the HeadProjection of every head was kept to the block's end
before, now only its two norms). High-water resident sets (VmHWM) of ``weight_scores`` on
Gemma-3-270M, 17:36–17:50 UTC: one thread +151 MiB (main +152), two threads +214 MiB
(main, MKL threads: +170); of layer 0 alone (2 threads) +155, of layers 0–2 +176. With
``MALLOC_MMAP_THRESHOLD_=65536`` (glibc unmaps every freed block of ≥ 64 kB at once, so the
high-water mark counts live arrays, not its retained free lists) layer 0 alone +107 MiB and
layers 0–2 +115 MiB (two threads); per block, the projection's live peak is +43 MiB on one
thread and +72 MiB on two (heads in flight), against one layer of 42.5 MiB (attention
12.5 MiB): flat in depth up to glibc's retention, but still ≈ 2.5 layers on two threads,
not "one layer + a constant". On a random grouped-query layer of d = 4096, d_h = 128,
H = 32, H_kv = 8 (attention 320 MiB in float64, one Llama-3-8B-sized layer 1664 MiB) the
projection peaked at +1467 MiB in a fresh process (52 s at load ≈ 6; before this change),
of which the kept bases are 32 × 16 MiB; the d × d work arrays of the dense form
(H·4·d²·8 bytes) would have been 16 GiB.

Precision and memory (issue 33, branch gemma6, 19:47–20:01 UTC, shared machine, load
average 4.3–6.9 from other jobs). ``dtype=torch.float32`` runs A_s's and the bracket's
eigendecompositions and the products around them in float32 (MATH.md §12, "Factor form";
M̃, its inertia, the solve, the residuals and Saponati's scores in float64; a head whose
rank or sign decision is unclear in float32 projected again in float64: 1 of Gemma-3's 72
heads, 3 of MiniLM's 72, 16 of SmolLM2's 270). CPU ms per Gemma-3 head, one thread, same
process: 200 → 127 (eigh 101 → 52, the RoPE Grams' 2k × r × r product gone: C = ĜĜᵀ,
S from Ĝ(EZ)). ``weight_scores`` on Gemma-3-270M in one process, interleaved, one thread:
float64 15.3 / 13.9 CPU s, float32 9.7 / 11.0 (1.4×). Largest relative difference of
float32's per-head scores to float64's: MiniLM definite residual 1.1e-4, drift 2.3e-4;
SmolLM2 definite residual 1.5e-3, rope residual 1.7e-4; Gemma-3 rope residual 6.6e-4,
definite residual 3.4e-4; symmetry residual ≤ 2.6e-6, value residual ≤ 6.2e-7, Saponati's
scores float64's (≤ 7.6e-13); inertia and sign equal on every head of the three. float64
against main: ≤ 7.6e-13 (the per-head Saponati scores now in Q rather than QE), inertia,
sign and breaks equal. This benchmark, ``--models gemma3 --stream-only``:

| threads | dtype | stream s | stream CPU s | headers +MiB | stream +MiB |
|---|---|---|---|---|---|
| 1 | float64 | 34.1 | 17.7 | 10 | 110 |
| 1 | float32 | 26.2 | 10.9 | 10 | 113 |
| 2 | float64 | 31.3 | 16.0 | 10 | 184 |
| 2 | float32 | 24.8 | 12.2 | 10 | 188 |

(wall seconds several times an idle core's at this load; before: +140 / +210 MiB at load
≈ 9, +124 / +195 idle). Where the peak goes, ``MALLOC_MMAP_THRESHOLD_=65536`` (live arrays,
not glibc's free lists), float64, one thread: one layer per call +44–45 MiB above the start
on every layer (headers ≈ 10, the block's attention tensors 12.5 and their reading, the
head in flight's ≈ 7 r × r work arrays at the bracket's eigendecomposition ≈ 22), +61 on
the first (one-time imports and caches) and +52 on the first global layer (its RoPE table);
layers 0–2 in one call +80 → +60 MiB (one thread) and +111 → +92 (two) with this change
(no structured head kept by weight_scores: 4 × 5 MiB of bases and mobilities per block; the
bracket written in one array and the clip's residuals in place; the dense RoPE rotations,
7.3 MiB, not cached where the pair form holds). The whole model in one call still climbs
≈ 1.5 MiB per block (+61 → +95 over 18 blocks), all of it RssFile: the memory-mapped GGUF
pages of the attention tensors read, clean and reclaimable, unmapped when the file is
closed; the anonymous resident set is flat in depth after the first global layer (197 →
205 MiB at block 5, then 205). (Dropped since, below.) The float32 precision
leaves the live peak as it is (its float64 parts — the bracket, M̃ — dominate it).

The GGUF reader now drops each read's mapped pages (:func:`tpde._io.gguf_file.release_pages`,
1192c5a): one thread, float64, load 3, +105 → +91 MiB. On the idle machine after the merges
(load 0.2–1.0, 20:23–20:25 UTC, this benchmark, ``--models gemma3 --stream-only``):

| threads | dtype | stream s | stream CPU s | headers +MiB | stream +MiB |
|---|---|---|---|---|---|
| 1 | float64 | 15.3 | 15.3 | 8 | 82 |
| 1 | float32 | 9.2 | 9.2 | 8 | 82 |
| 2 | float64 | 8.8 | 16.0 | 8 | 139 |
| 2 | float32 | 6.1 | 10.8 | 8 | 160 |

(before the inertia fallback below).

A review then found float32 misreading M̃'s inertia: on exact heads whose M̃ is
semidefinite of lower rank, float32's noise (measured ≤ 1.1·√p·eps₃₂·max|μ|, p = 3 … 256) was
counted as eigenvalues of both signs ((136, 120, 0) for the exact (16, 0, 240) at p = 256).
A head with an eigenvalue of M̃ within twice that noise now goes to float64 (INERTIA_BAND,
:mod:`tpde.fields.gradient_flow._factored`), and the RoPE Gram C is formed in float64: 24 of
Gemma-3's 72 heads, 21 of SmolLM2's 270 and 4 of MiniLM's 72 are projected twice, and
float32 no longer saves time on the shipped models (one process, load ≈ 1, CPU s float32 /
float64: Gemma-3 14.0 / 15.2, SmolLM2 9.4 / 9.1, MiniLM 1.0 / 0.7; the largest relative
difference of a score 1.7e-4, inertia and sign equal on every head). Idle again (load
0.8–1.2, 20:52–20:54 UTC):

| threads | dtype | stream s | stream CPU s | headers +MiB | stream +MiB |
|---|---|---|---|---|---|
| 1 | float64 | 16.5 | 16.1 | 8 | 73 |
| 1 | float32 | 16.1 | 15.6 | 8 | 87 |
| 2 | float64 | 9.8 | 18.0 | 8 | 155 |
| 2 | float32 | 9.6 | 16.6 | 8 | 165 |

Issue 33's 5 s on 2 cores is not reached: 8.8–9.8 s on two idle threads in float64 (two
runs), ≈ 0.25 CPU s per head. The peak on one thread is one layer (42.5 MiB) plus ≈ 30–45
MiB (the headers, the block's attention tensors and the head in flight's work arrays), flat
in depth; on two threads one more head's work arrays and glibc's per-thread arenas.
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
start, cpu = time.perf_counter(), time.process_time()
if sys.argv[2] == "headers":  # what any reading of the checkpoint holds
    size, loading = pretrained.checkpoint_size(path), 0.0
    result = pretrained.ModelStructure((), (), None)
elif sys.argv[2] == "stream":
    dtype = getattr(torch, sys.argv[5])
    result, loading = pretrained.weight_scores(path, dtype=dtype), 0.0
else:
    model = pretrained.load(path)
    loading = time.perf_counter() - start
    result = pretrained.model_structure(model)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
if sampler is None:
    peak = status("VmHWM:") - base
else:
    sampler.__exit__(None, None, None)
    peak = sampler.extra
names = sys.argv[4].split(",") if result.reports else []
tables = {n: result.table(n).tolist() for n in names}
print(json.dumps({"seconds": seconds, "cpu": cpu, "loading": loading, "peak": peak,
                  "tables": tables}))
"""


def run(getter: str, how: str, threads: int = 1, dtype: str = "float64") -> dict:
    """One way of scoring in a fresh subprocess with ``threads`` threads (the stream in
    ``dtype``): its JSON record."""
    n = str(threads)
    env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, getter, how, str(ROOT / "benchmarks"), ",".join(SCORES),
         dtype],
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
    parser.add_argument("--threads", type=int, default=1, help="threads per subprocess")
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="the stream's working precision (weight_scores' dtype)",
    )
    parser.add_argument(
        "--stream-only",
        action="store_true",
        help="no load + model_structure run (its columns and diff: nan)",
    )
    args = parser.parse_args()
    ways = ("headers", "stream") if args.stream_only else ("headers", "stream", "load")
    rows = []
    for key in ["minilm"] if args.quick else args.models:
        title, getter = MODELS[key]
        path = getattr(pretrained, getter)()
        size32, size64 = (checkpoint_size(path, dtype) for dtype in (torch.float32, torch.float64))
        runs = {how: run(getter, how, args.threads, args.dtype) for how in ways}
        none = {"seconds": math.nan, "loading": math.nan, "peak": math.nan}
        runs.setdefault("load", none)
        diff = math.nan
        if not args.stream_only:
            diff = largest_difference(runs["stream"]["tables"], runs["load"]["tables"])
        mib = 2.0**20
        rows.append({
            "model": title,
            "f32": f"{size32.total / mib:.0f}",
            "layer": f"{size64.largest_block / mib:.1f}",
            "attn": f"{max(size64.attention) / mib:.1f}",
            **{f"{how} s": f"{runs[how]['seconds']:.1f}" for how in ("stream", "load")},
            "stream CPU s": f"{runs['stream']['cpu']:.1f}",
            **{f"{how} +MiB": f"{r['peak'] / mib:.0f}" for how, r in runs.items()},
            "diff": f"{diff:.1e}",
        })  # fmt: skip
        rows[-1]["load s"] += f" ({runs['load']['loading']:.1f})"
        print(f"{key}: done", file=sys.stderr, flush=True)
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
