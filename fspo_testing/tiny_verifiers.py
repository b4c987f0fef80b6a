"""Fact-checker checkpoints of the published layouts (MiniCheck, FactCG) with random weights, built offline.

Each builder writes a directory that loads the way the published checkpoint does: the real
architecture (``RobertaForSequenceClassification``, ``DebertaV2ForSequenceClassification``,
``T5ForConditionalGeneration``) with a real tokenizer of its kind trained here (byte-level BPE for RoBERTa, SentencePiece for DeBERTa-v3 and T5)
on ``texts`` (default: a small built-in corpus) with ``tokenizer_vocab`` entries. ``dims`` picks tiny
sizes for tests (default) or the full-size ones (``FULL_SIZE``) for throughput benchmarks.
"""

from __future__ import annotations

import random
from pathlib import Path

# The published architectures' sizes (config.json of each checkpoint's base model).
FULL_SIZE = {
    "roberta-large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 50265,
    },
    "deberta-v3-large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 128100,
    },
    "flan-t5-large": {
        "d_model": 1024,
        "d_kv": 64,
        "d_ff": 2816,
        "num_layers": 24,
        "num_heads": 16,
        "vocab_size": 32128,
    },
}
# The size-independent fields of each layout's config (the tokenizer's special ids aside).
LAYOUT = {
    "roberta-large": {"max_position_embeddings": 514, "type_vocab_size": 1, "num_labels": 2},
    "deberta-v3-large": {
        "max_position_embeddings": 512,
        "type_vocab_size": 0,
        "relative_attention": True,
        "position_buckets": 256,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        "layer_norm_eps": 1e-7,
        "num_labels": 2,
    },
    "flan-t5-large": {
        "feed_forward_proj": "gated-gelu",
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    },
}
TINY = {
    "roberta-large": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "deberta-v3-large": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "flan-t5-large": {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4},
}
_WORDS = (
    "the a of in is was works for company headquartered city river born wrote novel team won cup "
    "paris france lima peru bolt mills vigio shipping students library exams vacation moon apples "
    "based on paragraph above can we conclude that choose your answer options yes no think predict "
    "supported claim document evidence step reasoning because therefore located founded year"
).split()


def corpus(lines: int = 400, seed: int = 0) -> list[str]:
    """Sentences of a small English-like vocabulary (with digits and punctuation) to train tokenizers on."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 2025)))
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ",", ":"]) + ' "Yes" - No\n')
    return out


def _sentencepiece_tokenizer(tokenizer_cls, file_name: str, vocab_size: int, texts: list[str], pieces: dict, **kwargs):
    """``tokenizer_cls`` loaded from a SentencePiece (BPE) model (``file_name``) trained on ``texts``."""
    import tempfile

    import sentencepiece as spm

    with tempfile.TemporaryDirectory() as directory:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_prefix=f"{directory}/trained",
            vocab_size=vocab_size,
            model_type="bpe",
            hard_vocab_limit=False,
            character_coverage=1.0,
            minloglevel=2,
            **pieces,
        )
        Path(f"{directory}/trained.model").rename(f"{directory}/{file_name}")
        return tokenizer_cls.from_pretrained(directory, **kwargs)


def _scaled(config: dict, vocab_size: int) -> dict:
    """``config`` with a trained tokenizer's vocabulary unless a full-size one asks for more rows."""
    return {**config, "vocab_size": max(config.get("vocab_size", 0), vocab_size)}


def build_roberta_checker(
    output_dir: str | Path,
    dims: dict | None = None,
    seed: int = 0,
    texts: list[str] | None = None,
    tokenizer_vocab: int | None = None,
) -> Path:
    """A MiniCheck-RoBERTa-Large layout: ``RobertaForSequenceClassification`` (2 labels) + byte-level BPE."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForSequenceClassification, RobertaTokenizer

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts or corpus(), vocab_size=tokenizer_vocab or 600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe.save_model(str(output_dir))
    tokenizer = RobertaTokenizer(vocab=str(output_dir / "vocab.json"), merges=str(output_dir / "merges.txt"))
    config = RobertaConfig(
        **_scaled(dims or TINY["roberta-large"], len(tokenizer)),
        **LAYOUT["roberta-large"],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    RobertaForSequenceClassification(config).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def build_deberta_v3_checker(
    output_dir: str | Path,
    dims: dict | None = None,
    seed: int = 0,
    texts: list[str] | None = None,
    tokenizer_vocab: int | None = None,
) -> Path:
    """A MiniCheck/FactCG-DeBERTa-v3-Large layout: ``DebertaV2ForSequenceClassification`` (2 labels, v3's
    relative attention) + a SentencePiece tokenizer with DeBERTa-v3's ids ([PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3)."""
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2Tokenizer

    output_dir = Path(output_dir)
    pieces = {
        "pad_id": 0,
        "bos_id": 1,
        "eos_id": 2,
        "unk_id": 3,
        "pad_piece": "[PAD]",
        "bos_piece": "[CLS]",
        "eos_piece": "[SEP]",
        "unk_piece": "[UNK]",
        "user_defined_symbols": ["[MASK]"],
    }
    tokenizer = _sentencepiece_tokenizer(
        DebertaV2Tokenizer, "spm.model", tokenizer_vocab or 400, texts or corpus(), pieces
    )
    config = DebertaV2Config(
        **_scaled(dims or TINY["deberta-v3-large"], len(tokenizer)),
        **LAYOUT["deberta-v3-large"],
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    DebertaV2ForSequenceClassification(config).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def build_flan_t5_checker(
    output_dir: str | Path,
    dims: dict | None = None,
    seed: int = 0,
    texts: list[str] | None = None,
    tokenizer_vocab: int | None = None,
) -> Path:
    """A MiniCheck-Flan-T5-Large layout: ``T5ForConditionalGeneration`` (gated-GELU, untied head) + a
    SentencePiece tokenizer with T5's ids (<pad>=0, </s>=1, <unk>=2) and its 100 sentinel tokens."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    output_dir = Path(output_dir)
    pieces = {
        "pad_id": 0,
        "eos_id": 1,
        "unk_id": 2,
        "bos_id": -1,
        "pad_piece": "<pad>",
        "eos_piece": "</s>",
        "unk_piece": "<unk>",
    }
    tokenizer = _sentencepiece_tokenizer(
        T5Tokenizer, "spiece.model", tokenizer_vocab or 300, texts or corpus(), pieces, extra_ids=100
    )
    config = T5Config(
        **_scaled(dims or TINY["flan-t5-large"], len(tokenizer)),
        **LAYOUT["flan-t5-large"],
    )
    torch.manual_seed(seed)
    T5ForConditionalGeneration(config).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def hhem_full_size_model():
    """HHEM-2.1-Open's layout at its size with random weights: a T5 token classifier of flan-t5-base's sizes
    (encoder only, 2 labels), for throughput and precision benchmarks."""
    import torch
    from transformers import T5Config, T5ForTokenClassification

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=2048,
        num_layers=12,
        num_heads=12,
        feed_forward_proj="gated-gelu",
        num_labels=2,
        is_encoder_decoder=False,
    )
    return T5ForTokenClassification(config).eval()


BUILDERS = {
    "roberta-large": build_roberta_checker,
    "deberta-v3-large": build_deberta_v3_checker,
    "flan-t5-large": build_flan_t5_checker,
}
