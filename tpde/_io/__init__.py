"""Readers of checkpoint file formats that know nothing of Transformers: what ``safetensors``
and ``tokenizers`` are for a Hugging Face folder, for the GGUF files of llama.cpp.

- :mod:`tpde._io.gguf_file`: the GGUF container — header, tensor bytes (memory-mapped), every
  bound and truncation checked — and the dequantisation of its tensors by the ``gguf`` package.
- :mod:`tpde._io.gguf_tokenizer`: a ``tokenizers.Tokenizer`` from a GGUF file's
  ``tokenizer.ggml.*`` vocabulary (GPT-2 byte-level BPE, Gemma's SentencePiece BPE).
- :mod:`tpde._io.gguf_layouts`: the tensor layouts llama.cpp's converter writes (interleaved
  rotary rows, a fused QKV as blocks, stacked per-head norms), undone.
- :mod:`tpde._io.gguf_rope`: a file's RoPE scaling (``rope.scaling.*`` keys, per-pair RoPE
  tensors) in transformers' spelling, the ``rope_scaling`` dict of a config.json.

The last two are llama.cpp's conventions inside the format, as the tokenizer's are: which
family's tensors and keys take them is the translator's question. The translation of a file
into a model's config and state dict is :mod:`tpde.pretrained._gguf`'s; errors here are
``ValueError`` naming what is wrong, which the translator turns into
:class:`~tpde.pretrained.LoadError`.
"""
