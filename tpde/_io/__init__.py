"""File-format readers and llama.cpp's converter conventions: what ``safetensors`` and
``tokenizers`` are for a Hugging Face folder, for the GGUF files of llama.cpp, and the row
layouts its converter writes, undone. Nothing here reads a config key or chooses by family:
which family's tensors and vocabulary take which convention is the translator's question.

- :mod:`tpde._io.gguf_file`: the GGUF container — header, tensor bytes (memory-mapped), every
  bound and truncation checked — and the dequantisation of its tensors by the ``gguf`` package.
- :mod:`tpde._io.gguf_tokenizer`: a ``tokenizers.Tokenizer`` from a GGUF file's
  ``tokenizer.ggml.*`` vocabulary (GPT-2 byte-level BPE, Gemma's SentencePiece BPE).
- :mod:`tpde._io.gguf_layouts`: the row layouts llama.cpp's converter writes (interleaved
  rotary rows, a fused QKV as blocks, stacked per-head norms), undone: array operations.

The translation of a file into a model's config and state dict — its metadata as
transformers' config.json keys, its RoPE scaling as a ``rope_scaling`` dict
(:mod:`tpde.pretrained._gguf_rope`) — is :mod:`tpde.pretrained._gguf`'s; errors here are
``ValueError`` naming what is wrong, which the translator turns into
:class:`~tpde.pretrained.LoadError`.
"""
