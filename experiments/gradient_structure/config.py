"""The ``gradient-structure`` study's configuration: its name, title, sizes and their checks."""

from __future__ import annotations

from dataclasses import dataclass

NAME = "gradient-structure"
ORDER = 13  # place in ``tpde run`` and in the report
TITLE = "is a trained Transformer a gradient flow? structure, energies, JKO steps, metrics"
MODELS = ("minilm", "smollm2", "gemma3")
KIND = {"minilm": "encoder", "smollm2": "decoder", "gemma3": "decoder"}
LAYERS = ("all", "ends", "first")
COLORS = {"minilm": "C0", "smollm2": "C1", "gemma3": "C2"}


@dataclass(frozen=True)
class Config:
    sentences: int = 1  # the first sentences of the bundled corpus
    tokens: int = 12  # each sentence cut to its first tokens (n: JKO and W2 are O(n²)–O(n³))
    layers: str = "all"  # "all", "ends" (the first and the last) or "first" (the quick size)
    taus: str = "0.125,0.25,0.5,1,2"  # the step sizes scanned for the best fit
    seed: int = 0  # the random controls' weights
    control_width: int = 128  # d of every family's random model (4 heads of d/4)
    control_layers: int = 2  # layers of every family's random model

    def check(self) -> None:
        if not 1 <= self.sentences <= 238:
            raise ValueError(
                f"sentences must be in 1 … 238 (the corpus); received {self.sentences}."
            )
        if not 2 <= self.tokens <= 128:
            raise ValueError(f"tokens must be in 2 … 128; received {self.tokens}.")
        if self.layers not in LAYERS:
            raise ValueError(
                f"layers must be one of {', '.join(LAYERS)}; received {self.layers!r}."
            )
        if not 8 <= self.control_width <= 256 or self.control_width % 4:
            raise ValueError(
                "control_width must be a multiple of 4 (the random models' 4 heads) in 8 … 256; "
                f"received {self.control_width}."
            )
        if not 1 <= self.control_layers <= 8:
            raise ValueError(f"control_layers must be in 1 … 8; received {self.control_layers}.")
        taus = self.tau_values()
        if not taus or min(taus) <= 0:
            raise ValueError(
                f"taus must be a comma-separated list of steps > 0; received {self.taus!r}."
            )

    def tau_values(self) -> list[float]:
        """The step sizes, parsed from ``taus``."""
        try:
            return [float(t) for t in self.taus.split(",") if t.strip()]
        except ValueError:
            return []

    def memory_bytes(self) -> int:
        """The peak resident memory of a quick run (measured 2.7 GB: the models' float32
        weights, loaded one after the other, Gemma's dequantised embedding the largest)."""
        return 3 * 10**9


QUICK = {"sentences": "1", "tokens": "8", "layers": "first", "taus": "0.5,1,2",
         "control_width": "64", "control_layers": "1"}  # fmt: skip
