"""tensor2tensor's Transformer sets under their own names (`--hparams_set=transformer_base`).

Each runs as the mesh-tf Transformer of the same width, depth and heads, with T2T's
dropout, label smoothing, learning-rate curve and token-counted batch; the conversion
(t2tcli.t2t_compat.hparams_convert) says so in one log line when a set is used.
"""

from __future__ import annotations

from collections.abc import Callable

from t2tcli.hparams import HParams
from t2tcli.registry import register_hparams
from t2tcli.t2t_compat.hparams_convert import convert
from t2tcli.t2t_compat.t2t_hparams import TRANSFORMER_SETS, T2THParams


def _registered(name: str, make: Callable[[], T2THParams]) -> None:
    def converted() -> HParams:
        return convert(make(), name)

    converted.__doc__ = f"tensor2tensor's {name}: {(make.__doc__ or '').strip()}"
    register_hparams(name)(converted)


for _name, _make in TRANSFORMER_SETS.items():
    _registered(_name, _make)
