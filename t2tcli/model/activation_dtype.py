"""The activation dtype a model runs in on this machine, resolved once at run time.

`activation_dtype=auto` (the default) means bfloat16 where the hardware multiplies it
natively (t2tcli.model.hardware.native_bfloat16) and float32 everywhere else; variables
stay float32 either way, so a model trained on one machine runs at full speed on another.
Every binary that builds the model asks `resolve()`.

Why not bfloat16 everywhere: without native support, TensorFlow's bfloat16 einsum is a
scalar contraction far slower than float32. The CPU kernels compute such einsums in
float32 instead (t2tcli.model.kernel_layout.emulated_einsum), but the element-wise work
left gains nothing from bfloat16 there, so float32 stays the faster choice (BENCHMARKS.md
has the measurements).
"""

from __future__ import annotations

import dataclasses

from absl import logging

from t2tcli.errors import UserError
from t2tcli.model import hardware

ACTIVATION_DTYPES = ("auto", "bfloat16", "float32")


@dataclasses.dataclass(frozen=True)
class Choice:
    """The dtype to run in, why, and a warning when an explicit choice will be slow."""

    dtype: str
    reason: str
    warning: str | None = None


def check(requested: str) -> None:
    """A one-line error for a value that is not auto, bfloat16 or float32."""
    if requested not in ACTIVATION_DTYPES:
        raise UserError(f"hparam activation_dtype={requested!r}: use one of {', '.join(ACTIVATION_DTYPES)}")


def choose(requested: str, machine: hardware.Machine) -> Choice:
    """The dtype for `requested` (auto, bfloat16 or float32) on `machine`."""
    check(requested)
    native, why = hardware.native_bfloat16(machine)
    if requested == "auto":
        dtype = "bfloat16" if native else "float32"
        return Choice(dtype, f"activation_dtype=auto: {dtype} on this {why}")
    warning = None
    if requested == "bfloat16" and not native:
        warning = (
            f"activation_dtype=bfloat16 on this {why}: bfloat16 is emulated here, and training steps run "
            "slower than float32 on such CPUs; activation_dtype=auto picks the faster one"
        )
    return Choice(requested, f"activation_dtype={requested} (set explicitly)", warning)


_said: set[str] = set()


def resolve(requested: str, use_tpu: bool = False, machine: hardware.Machine | None = None) -> str:
    """The concrete dtype ('bfloat16' or 'float32') for hparam `requested` here.

    Logs once per process what was chosen and why, and the warning for an explicit
    bfloat16 that this machine runs slowly.
    """
    check(requested)
    choice = choose(requested, machine or hardware.detect(use_tpu))
    if choice.reason not in _said:
        _said.add(choice.reason)
        logging.info("activations in %s (%s)", choice.dtype, choice.reason)
        if choice.warning:
            logging.warning("%s", choice.warning)
    return choice.dtype
