"""A GPT-2 style byte-level BPE tokenizer built from a GGUF file's ``tokenizer.ggml.*`` metadata.

GGUF files carry no ``tokenizer.json``: the vocabulary (``tokens``, in GPT-2's byte-to-
unicode spelling, e.g. "Ġ" for a space), the merge rules (``merges``, "a b" meaning a + b,
best first), the token types (3 = control) and the special ids are metadata. The tokenizer
here is the one transformers builds from the same metadata (``AutoTokenizer.from_pretrained
(folder, gguf_file=…)``; the tests compare the ids): the GPT-2 split regex and byte-level
alphabet, BPE with the file's merges, control tokens kept whole, no BOS added when the file
says ``add_bos_token = False``.
"""

from __future__ import annotations

from tpde._validation import require_package as _require

__all__ = ["build_tokenizer"]

#: llama.cpp pre-tokenizer names whose text split is GPT-2's regex
#: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (llama.cpp's
#: "smollm" also cuts digits one by one; SmolLM2's vocabulary has no token of two digits, so
#: the ids are the same).
GPT2_SPLIT = ("default", "gpt-2", "gpt2", "smollm")
CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


def build_tokenizer(metadata: dict, source: str = "the GGUF file"):
    """A ``tokenizers.Tokenizer`` from ``tokenizer.ggml.*`` metadata (:class:`LlamaFile`).

    Raises
    ------
    ValueError
        The file's tokenizer is not byte-level BPE ("gpt2"), its pre-tokenizer is not one
        splitting text like GPT-2 (:data:`GPT2_SPLIT`), or its merges are missing.
    """
    _require("tokenizers")
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    kind, pre = metadata.get("model"), metadata.get("pre") or "default"
    if kind != "gpt2":
        raise ValueError(
            f"{source} has a tokenizer of type {kind!r}; only GPT-2 style byte-level BPE "
            "('gpt2') is supported."
        )
    if pre not in GPT2_SPLIT:
        raise ValueError(
            f"{source} asks for the pre-tokenizer {pre!r}; supported: {', '.join(GPT2_SPLIT)} "
            "(GPT-2's split)."
        )
    if not metadata.get("merges"):
        raise ValueError(f"{source} has no tokenizer.ggml.merges; byte-level BPE needs them.")
    tokens = list(metadata["tokens"])
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = [tuple(rule.split(" ", 1)) for rule in metadata["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata.get("token_type") or ()
    control = [t for t, kind in zip(tokens, types, strict=False) if kind == CONTROL]
    tokenizer.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    return tokenizer
