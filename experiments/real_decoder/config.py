"""The ``real-decoder`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

NAME = "real-decoder"
ORDER = 10  # place in ``tpde run`` and in the report
TITLE = "a real decoder: SmolLM2-135M's token clouds vs its own flow"
F64 = torch.float64
#: The model's schedules compared with the network (not attention variants: routes).
SCHEDULE_KINDS = ("attn+norm", "attn", "attn+mlp", "sphere")
LABELS = {"network": "network (h = 1)", "attn+norm": "attention + RMSNorm (MLP = 0)",
          "attn": "attention only (no norm)", "attn+mlp": "attention + MLP (no norms)",
          "sphere": "post-LN sphere model", "flow": "continuous flow (dopri5)"}  # fmt: skip
COLORS = {"network": "C0", "attn+norm": "C3", "attn": "C1", "attn+mlp": "C2", "sphere": "C4",
          "flow": "k"}  # fmt: skip


@dataclass(frozen=True)
class Config:
    sentences: int = 48  # the first sentences of the bundled corpus (questions 2–3)
    flow_sentences: int = 8  # … of which the first go through the flow (question 1)
    flow_rtol: float = 1e-6  # dopri5 tolerance of the continuous-depth flow (atol = rtol)
    splits: tuple[int, ...] = (2, 4, 8, 16)  # Lie–Trotter at h = 1/k
    cluster_delta: float = 1e-2  # tokens i, j in one angular cluster when cos > 1 − δ
    loop_sentences: int = 2  # question 4
    loop_passes: int = 1000  # passes through the 30 layers

    def check(self) -> None:
        if not 1 <= self.sentences <= 238 or not 1 <= self.loop_sentences <= 238:
            raise ValueError("sentences and loop_sentences must be in 1 … 238 (the corpus).")
        if not 1 <= self.flow_sentences <= self.sentences:
            raise ValueError("flow_sentences must be in 1 … sentences.")
        if not 0 < self.flow_rtol < 1 or not 0 < self.cluster_delta < 1:
            raise ValueError("flow_rtol and cluster_delta must lie in (0, 1).")
        if not self.splits:
            raise ValueError("splits must hold at least one k >= 2 (Lie–Trotter at h = 1/k).")
        if any(k < 2 for k in self.splits) or self.loop_passes < 1:
            raise ValueError("splits must be integers >= 2 (h = 1/k) and loop_passes >= 1.")
        if not 1e-13 <= self.flow_rtol <= 1e-2:
            raise ValueError(
                f"flow_rtol must lie in [1e-13, 1e-2]: dopri5 cannot meet a tolerance below "
                f"1e-13 on float64 states; received {self.flow_rtol}."
            )
        if self.cluster_delta < 1e-14:
            raise ValueError(
                f"cluster_delta must be >= 1e-14: cos > 1 − δ cannot be resolved in float64 "
                f"below that; received {self.cluster_delta}."
            )
        if max(self.splits) > 10**4 or self.loop_passes > 10**5:
            raise ValueError(
                f"splits must be at most 10000 (30·k Lie–Trotter steps) and loop_passes at "
                f"most 100000 (30 layers each); received splits {self.splits}, loop_passes "
                f"{self.loop_passes}."
            )

    def memory_bytes(self) -> int:
        """The model's float32 weights (SmolLM2-135M: ~0.6 GB) and the float64 hidden states
        of every sentence (≤ 128 tokens × 576 coordinates × 31 depths × (max split + 2)
        routes)."""
        states = self.sentences * 128 * 576 * 31 * (max(self.splits) + 2)
        return 6 * 10**8 + 8 * states


QUICK = {"sentences": "4", "flow_sentences": "1", "splits": "2,4", "loop_sentences": "1",
         "loop_passes": "10"}  # fmt: skip


MINILM_ROUTES = ("whole", "attn+ln", "attn", "attn+mlp")
