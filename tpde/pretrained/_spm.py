"""A Gemma SentencePiece-BPE tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata.

Gemma GGUF files carry the vocabulary (``tokens``, spaces spelled "▁"), the token types
(3 control, 4 user-defined) and no merge rules. The tokenizer here is the one transformers
builds from the same metadata (``AutoTokenizer.from_pretrained(folder, gguf_file=…)``; the
slow tests compare the ids on the corpus): tokens made only of spaces respelled with "▁";
the merges recovered from the vocabulary — every split of a token into two tokens, ranked
by the merged token's place in the file (earlier first), ties by the lengths of the halves;
BPE with byte fallback; spaces normalised to "▁", the text split after each space, no
prefix space; control tokens special, user-defined tokens kept whole; BOS added in front
when the file says ``add_bos_token``.
"""

from __future__ import annotations

from tpde._validation import require_package as _require

__all__ = ["build_gemma_tokenizer", "recovered_merges"]

CONTROL, USER_DEFINED = 3, 4


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
