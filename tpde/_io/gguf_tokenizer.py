"""A ``tokenizers.Tokenizer`` from a GGUF file's ``tokenizer.ggml.*`` metadata: GPT-2 style
byte-level BPE (:func:`build_tokenizer`) or Gemma's SentencePiece BPE
(:func:`build_gemma_tokenizer`), built once per file and process (:func:`gguf_tokenizer`).

GGUF files carry no ``tokenizer.json``: the vocabulary, the token types (3 = control, 4 =
user-defined), the special ids and (BPE) the merge rules are metadata. Each tokenizer here is
the one transformers builds from the same metadata (``AutoTokenizer.from_pretrained(folder,
gguf_file=…)``; the tests compare the ids).

**Byte-level BPE** (``model`` "gpt2"): the vocabulary in GPT-2's byte-to-unicode spelling
(e.g. "Ġ" for a space), the merges ("a b" meaning a + b, best first); the GPT-2 split regex
and byte-level alphabet, BPE with the file's merges, control tokens kept whole, no BOS added
when the file says ``add_bos_token = False``.

**Gemma's SentencePiece BPE** (``model`` "llama"): spaces spelled "▁", no merge rules. Tokens
made only of spaces respelled with "▁"; the merges recovered from the vocabulary — every
split of a token into two tokens, ranked by the merged token's place in the file (earlier
first), ties by the lengths of the halves; BPE with byte fallback; spaces normalised to "▁",
the text split after each space, no prefix space; control tokens special, user-defined
tokens kept whole; BOS added in front when the file says ``add_bos_token``.
"""

from __future__ import annotations

from pathlib import Path

from tpde._validation import require_package as _require

__all__ = ["build_gemma_tokenizer", "build_tokenizer", "gguf_tokenizer", "recovered_merges"]

#: llama.cpp pre-tokenizer names whose text split is GPT-2's regex
#: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (llama.cpp's
#: "smollm" also cuts digits one by one; SmolLM2's vocabulary has no token of two digits, so
#: the ids are the same).
GPT2_SPLIT = ("default", "gpt-2", "gpt2", "smollm")
CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


def build_tokenizer(metadata: dict, source: str = "the GGUF file"):
    """A GPT-2 style byte-level BPE ``tokenizers.Tokenizer`` from ``tokenizer.ggml.*`` metadata
    (keys without the prefix: ``model``, ``pre``, ``tokens``, ``merges``, ``token_type``).

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


USER_DEFINED = 4  # llama.cpp's LLAMA_TOKEN_TYPE_USER_DEFINED


def recovered_merges(tokens: list[str]) -> list[tuple[str, str]]:
    """The BPE merges a vocabulary without merges implies (module notes), best first."""
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = []
    for index, token in enumerate(tokens):
        local = [
            (token[:cut], token[cut:])
            for cut in range(1, len(token))
            if token[:cut] in vocab and token[cut:] in vocab
        ]
        local.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        merges.extend((index, left, right) for left, right in local)
    merges.sort(key=lambda m: (m[0], -len(m[1]), -len(m[2])))  # (−position, |l|, |r|) reversed
    return [(left, right) for _, left, right in merges]


def build_gemma_tokenizer(metadata: dict, source: str = "the GGUF file"):
    """A ``tokenizers.Tokenizer`` from Gemma's ``tokenizer.ggml.*`` metadata (keys without the
    prefix: ``model``, ``tokens``, ``token_type``, ``bos_token_id``, ``add_bos_token``,
    ``unknown_token_id``).

    Raises
    ------
    ValueError
        The tokenizer is not SentencePiece ("llama") or has no tokens.
    """
    _require("tokenizers")
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing

    if metadata.get("model") != "llama" or not metadata.get("tokens"):
        raise ValueError(
            f"{source} has a tokenizer of type {metadata.get('model')!r}; a Gemma tokenizer is "
            "SentencePiece ('llama') with its tokens."
        )
    tokens = ["▁" * len(t) if " " in t and not t.strip() else t for t in metadata["tokens"]]
    vocab = {token: index for index, token in enumerate(tokens)}
    unk = tokens[metadata.get("unknown_token_id", 3)]
    tokenizer = Tokenizer(models.BPE(vocab, recovered_merges(tokens), fuse_unk=True,
                                     unk_token=unk, byte_fallback=True))  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    types = metadata.get("token_type") or ()
    kinds = list(zip(tokens, types, strict=False))
    tokenizer.add_special_tokens(
        [AddedToken(t, normalized=False, special=True) for t, k in kinds if k == CONTROL]
    )
    tokenizer.add_tokens(
        [AddedToken(t, normalized=False, special=False) for t, k in kinds if k == USER_DEFINED]
    )
    bos = metadata.get("bos_token_id")
    if metadata.get("add_bos_token", True) and bos is not None:
        first = tokens[bos]
        tokenizer.post_processor = TemplateProcessing(
            single=f"{first} $A", pair=f"{first} $A $B", special_tokens=[(first, bos)]
        )
    return tokenizer


_BUILT: dict = {}


def gguf_tokenizer(path, metadata: dict, kind: str):
    """The tokenizer of the GGUF file ``path`` (``metadata``: its metadata, the
    ``tokenizer.ggml.*`` keys read), by ``kind`` ("bpe": :func:`build_tokenizer`, "spm":
    :func:`build_gemma_tokenizer`); None without ``tokenizer.ggml.tokens``. Built once per
    file (path, size, modification time) and process: Gemma's 262144 tokens take ~12 s.
    A ValueError (the builders') where the file's tokenizer is not of that kind."""
    if not metadata.get("tokenizer.ggml.tokens"):
        return None
    fields = {k.removeprefix("tokenizer.ggml."): v for k, v in metadata.items()
              if k.startswith("tokenizer.ggml.")}  # fmt: skip
    build = build_tokenizer if kind == "bpe" else build_gemma_tokenizer
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, kind)
    if key not in _BUILT:
        _BUILT[key] = build(fields, str(path))
    return _BUILT[key]
