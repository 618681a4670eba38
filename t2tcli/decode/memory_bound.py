"""Whether a decode's batch can fit in the memory this process may have, asked before it starts.

Each bound of t2tcli.decode.settings is sane alone, but their product is what a decode
allocates: every row of a batch, times its beams, keeps its decoder's keys and values
for every step and the encoder's for every input token. Once the batch is known (the
rows there are, at most batch_size), that product is set against the memory the
machine, its cgroup or the process's address-space limit allows, and a decode that
could not fit is refused in one line naming the settings instead of dying half-way.

Imports: core, decode (settings).
"""

from __future__ import annotations

import os
import resource

from t2tcli.decode.settings import DecodeSettings
from t2tcli.errors import UserError
from t2tcli.hparams import HParams

# Bytes of one key or value at the least (bfloat16): the estimate is a floor, so no
# decode that could fit is refused.
_BYTES_PER_VALUE = 2
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def available_bytes() -> int:
    """The memory this process may have: the machine's, its cgroup's limit, or its
    address-space limit, whichever is least."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        pass
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits) if limits else 1 << 62


def cache_bytes(settings: DecodeSettings, hp: HParams, rows: int, inputs_length: int) -> int:
    """A floor on what one batch of `rows` lines keeps while it decodes: the decoder's
    self-attention keys and values for every step and its cross-attention keys and
    values for every input token, for every row and beam."""
    hypotheses = rows * settings.beam_size
    per_token = 2 * int(hp.num_decoder_layers) * int(hp.num_heads) * int(hp.d_kv) * _BYTES_PER_VALUE
    return hypotheses * (settings.targets_length(hp) + inputs_length) * per_token


def check(
    settings: DecodeSettings,
    hp: HParams,
    rows: int,
    inputs_length: int,
    available: int | None = None,
    in_flight: int = 1,
) -> None:
    """A one-line error when `in_flight` batches of `rows` lines, decoding at once, could
    not fit in `available` bytes (default: `available_bytes()`)."""
    need = in_flight * cache_bytes(settings, hp, rows, inputs_length)
    have = available_bytes() if available is None else available
    if need > have:
        batches = f"{in_flight} batches in flight" if in_flight > 1 else "a batch"
        raise UserError(
            f"--decode_hparams: {batches} of {rows} lines x beam_size={settings.beam_size}, decoding "
            f"{settings.targets_length(hp)} tokens from {inputs_length}, keeps at least {need >> 20} MiB of "
            f"attention caches, more than the {have >> 20} MiB this process may use; lower batch_size, beam_size "
            "or max_decode_length"
        )
