"""BERT and RoBERTa: Post-LayerNorm encoders, bidirectional multi-head attention with biases,
GELU MLP, learned positions (RoBERTa: offset pad + 1) and token types, then the embedding
LayerNorm; the masked-LM head, pooler and sequence-classification head where present.

all-MiniLM-L6-v2 (:func:`tpde.pretrained.minilm_path`) is a BERT checkpoint of this family.
"""

from __future__ import annotations

from tpde.pretrained.families.base import ENCODER_BIASES, REQUIRED, Family, register

__all__ = ["BERT", "BERT_HONOURED", "BERT_KEYS"]

BERT_KEYS = {
    "hidden": ("hidden_size", REQUIRED),
    "layers": ("num_hidden_layers", REQUIRED),
    "heads": ("num_attention_heads", REQUIRED),
    "kv_heads": ("num_attention_heads", REQUIRED),
    "head_dim": (None, "=hidden/heads"),  # transformers: always d/H (no head_dim key)
    "mlp_hidden": ("intermediate_size", REQUIRED),
    "vocab": ("vocab_size", REQUIRED),
    "context": ("max_position_embeddings", REQUIRED),
    "norm_eps": ("layer_norm_eps", 1e-12),
    "activation": ("hidden_act", "gelu"),
    "type_vocab": ("type_vocab_size", 2),
    "pad": ("pad_token_id", 0),
    "tied": ("tie_word_embeddings", True),  # the masked-LM decoder is the embedding
}

BERT_HONOURED = {
    "position_embedding_type": ("absolute",),
    "is_decoder": (False,),
    "add_cross_attention": (False,),
}

_NAMES = {
    "embed": "embeddings.word_embeddings",
    "positions": "embeddings.position_embeddings",
    "token_types": "embeddings.token_type_embeddings",
    "embed_norm": "embeddings.LayerNorm",
    "q": "encoder.layer.{l}.attention.self.query",
    "k": "encoder.layer.{l}.attention.self.key",
    "v": "encoder.layer.{l}.attention.self.value",
    "o": "encoder.layer.{l}.attention.output.dense",
    "attn_norm": "encoder.layer.{l}.attention.output.LayerNorm",
    "fc1": "encoder.layer.{l}.intermediate.dense",
    "fc2": "encoder.layer.{l}.output.dense",
    "mlp_norm": "encoder.layer.{l}.output.LayerNorm",
}

#: BertForMaskedLM's and RobertaForMaskedLM's heads (RoBERTa's σ is the erf GELU whatever
#: hidden_act says: ``gelu`` in RobertaLMHead).
_MLM_HEADS = (
    {
        "mlm_dense": "cls.predictions.transform.dense",
        "mlm_norm": "cls.predictions.transform.LayerNorm",
        "mlm_bias": "cls.predictions.bias",
        "head": "cls.predictions.decoder",
        "ignored": ("cls.predictions.decoder.bias",),
        "activation": None,
    },
    {
        "mlm_dense": "lm_head.dense",
        "mlm_norm": "lm_head.layer_norm",
        "mlm_bias": "lm_head.bias",
        "head": "lm_head.decoder",
        "ignored": ("lm_head.decoder.bias",),
        "activation": "gelu",
    },
)

BERT = register(
    Family(
        family="bert",
        summary=(
            "bidirectional MHA with biases; GELU MLP; learned positions (RoBERTa: offset pad + "
            "1) and token types, then the embedding LayerNorm; the masked-LM head, pooler and "
            "sequence-classification head where present"
        ),
        model_types=("bert", "roberta"),
        keys=BERT_KEYS,
        honoured=BERT_HONOURED,
        names=_NAMES,
        biases=ENCODER_BIASES,
        prefixes=("", "bert.", "roberta."),
        ignored=("cls.", "lm_head.", "classifier.", "qa_outputs."),  # heads not read (facts)
        buffers=("embeddings.position_ids",),  # transformers 4's stored arange
        norm="layernorm",
        placement="post",
        mlp="mlp",
        rotary=False,
        causal=False,
        facts={
            # positions start after the padding index for these model types (RoBERTa's
            # create_position_ids_from_input_ids): offset pad_token_id + 1 (its default 1)
            "pad_offset_types": {"roberta": 1},
            "token_type": "type 0 unless token_types are given",
            "head": "the masked-LM head where the files hold it (mlm_heads), the pooler where "
            "they hold it, the sequence-classification head of a *ForSequenceClassification "
            "(BERT's on the pooled token; RoBERTa's with its own dense + tanh); other task "
            "heads (next-sentence, token classification, multiple choice, QA) are not read",
        },
        mlm_heads=_MLM_HEADS,
        pooler="pooler.dense",
        classifiers=(
            {"classifier": "classifier"},
            {"cls_dense": "classifier.dense", "classifier": "classifier.out_proj"},
        ),
    )
)
