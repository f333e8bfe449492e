"""The ``real-models`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

NAME = "real-models"
ORDER = 12  # place in ``tpde run`` and in the report
TITLE = "three real models, three norm placements: MiniLM, SmolLM2, Gemma-3"
MODELS = ("minilm", "smollm2", "gemma3")
PLACEMENT = {"minilm": "Post-LN", "smollm2": "Pre-LN", "gemma3": "Peri-LN"}
COLORS = {"minilm": "C0", "smollm2": "C1", "gemma3": "C2"}


@dataclass(frozen=True)
class Config:
    sentences: int = 24  # the first sentences of the bundled corpus
    flow_sentences: int = 8  # … of which the first go through the flow (question 5)
    flow_step: float = 1 / 16  # the flow: Lie–Trotter at this step (order 1: → the flow)
    loop_passes: int = 500  # question 6: passes through the middle layer
    ideal_step: float = 1 / 16  # question 7: the idealised sphere model's RK4 step (1/k)

    def check(self) -> None:
        if not 1 <= self.sentences <= 238:
            raise ValueError(
                f"sentences must be in 1 … 238 (the corpus); received {self.sentences}."
            )
        if not 0 <= self.flow_sentences <= self.sentences:
            raise ValueError("flow_sentences must be in 0 … sentences.")
        if not _reciprocal(self.flow_step, 2):
            raise ValueError(
                f"flow_step must be 1/k for an integer k in 2 … 1000; received {self.flow_step}."
            )
        if not 1 <= self.loop_passes <= 10**5:
            raise ValueError(f"loop_passes must be in 1 … 100000; received {self.loop_passes}.")
        if not _reciprocal(self.ideal_step, 1):
            raise ValueError(
                f"ideal_step must be 1/k for an integer k in 1 … 1000 (so that steps land on "
                f"every layer's depth); received {self.ideal_step}."
            )

    def memory_bytes(self) -> int:
        """The three models' float32 weights (~0.1 + 0.6 + 1.1 GB with Gemma's dequantised
        262144-token embedding) and their hidden states (small)."""
        return 2 * 10**9


def _reciprocal(step: float, smallest: int) -> bool:
    """Is ``step`` 1/k for an integer k in ``smallest`` … 1000?"""
    if not 1e-3 <= step <= 1 / smallest:
        return False
    return abs(1 / step - round(1 / step)) <= 1e-9


QUICK = {"sentences": "2", "flow_sentences": "1", "flow_step": "0.5", "loop_passes": "20",
         "ideal_step": "0.25"}  # fmt: skip
