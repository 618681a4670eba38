"""Writes a small, randomly initialised Hugging Face T5 directory: a stand-in for a download.

    python examples/random_hf_t5.py --out=hf_t5                 # T5 v1.0 layout (relu, tied)
    python examples/random_hf_t5.py --out=hf_t5 --kind=v1_1     # T5 v1.1 / FLAN-T5 layout
    python examples/random_hf_t5.py --out=hf_t5 --kind=mt5      # mT5 (model_type mt5)

The directory has what a real one has (config.json, model.safetensors, spiece.model,
tokenizer_config.json): its SentencePiece model is trained on the shipped question
pairs, 100 sentinels come on top as in T5, and the weights are random, so every step of
the fine-tuning walkthrough runs offline in seconds. Needs torch and transformers
(the `test` extra); t2tcli itself reads such a directory without them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent.parent / "problems" / "data" / "quora" / "train.csv"
SENTINELS = 100


def sentencepiece_model(vocab_size: int) -> bytes:
    """A SentencePiece model with T5's special ids (pad 0, eos 1, unk 2), trained on the sample questions."""
    import sentencepiece as spm

    with open(SAMPLE, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    text = [row[column].lower() for row in rows for column in ("question1", "question2")]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=vocab_size,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        minloglevel=2,
    )
    return model.getvalue()


def build(out: str, kind: str, pieces: int, d_model: int, layers: int, seed: int, **config: int) -> None:
    """Writes the directory; `config` overrides T5Config's fields (e.g. d_ff, num_heads,
    d_kv, or vocab_size: more rows than the SentencePiece model and its sentinels)."""
    import torch
    from transformers import MT5Config, MT5ForConditionalGeneration, T5Config, T5ForConditionalGeneration

    proto = sentencepiece_model(pieces)
    rows = -(-(pieces + SENTINELS) // 128) * 128
    v1_1 = kind in ("v1_1", "mt5")
    config_class, model_class = (
        (MT5Config, MT5ForConditionalGeneration) if kind == "mt5" else (T5Config, T5ForConditionalGeneration)
    )
    fields = dict(
        vocab_size=rows,
        d_model=d_model,
        d_kv=d_model // 4,
        d_ff=4 * d_model if not v1_1 else 3 * d_model,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        feed_forward_proj="gated-gelu" if v1_1 else "relu",
        tie_word_embeddings=not v1_1,
        dropout_rate=0.1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    model = model_class(config_class(**{**fields, **config}))
    if v1_1:
        # T5 v1.1 has an output projection of its own; a fresh model may share the embedding's.
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * d_model**-0.5)
    model.save_pretrained(out)
    Path(out, "spiece.model").write_bytes(proto)
    tokenizer_config = {"tokenizer_class": "T5Tokenizer", "extra_ids": SENTINELS, "model_max_length": 512}
    Path(out, "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory to write (created)")
    parser.add_argument("--kind", choices=["v1_0", "v1_1", "mt5"], default="v1_0")
    parser.add_argument("--pieces", type=int, default=600, help="SentencePiece pieces (sentinels come on top)")
    parser.add_argument("--d_model", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    build(args.out, args.kind, args.pieces, args.d_model, args.layers, args.seed)
    print(args.out)


if __name__ == "__main__":
    main()
