"""The peer both benchmarks compare against: Hugging Face T5 shaped like our hparams.

One constructor keeps the training and decoding comparisons on the same model: T5
v1.0 layout (relu feed-forward, tied embeddings, relative attention), pad=0, eos=1,
random init, so nothing is downloaded.
"""

from __future__ import annotations

import os
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on: `taskset` or a cgroup cpuset narrows them, and
    `os.cpu_count()` (the machine's count) would then oversubscribe them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def t5_peer(hp: dict[str, Any], vocab_size: int, dropout_rate: float) -> Any:
    """A randomly initialised `T5ForConditionalGeneration` with `hp`'s dimensions."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    torch.set_num_threads(usable_cores())
    config = T5Config(
        vocab_size=vocab_size,
        d_model=hp["d_model"],
        d_ff=hp["d_ff"],
        d_kv=hp["d_kv"],
        num_heads=hp["num_heads"],
        num_layers=hp["num_encoder_layers"],
        num_decoder_layers=hp["num_decoder_layers"],
        relative_attention_num_buckets=hp.get("relative_attention_num_buckets", 32),
        feed_forward_proj="relu",
        dropout_rate=dropout_rate,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return T5ForConditionalGeneration(config)
