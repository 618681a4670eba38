"""Learning-rate schedules and optimizers, chosen by hparams.

Schedules are plain TF ops of the global step (not gin), so the value is logged and
summarised exactly as applied.
"""

from __future__ import annotations

from t2tcli.compat import tf
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.model.adafactor import FewPassAdafactor

# isort: split
# Imported after t2tcli.compat, whose shims mesh_tensorflow needs.
import mesh_tensorflow as mtf

SCHEDULES = ("constant", "rsqrt_decay", "linear_decay")
OPTIMIZERS = ("adafactor", "adam")
# Adafactor's class. mesh-tensorflow's own AdafactorOptimizer gives the same updates with more passes over memory.
ADAFACTOR: type[mtf.optimize.AdafactorOptimizer] = FewPassAdafactor


def check(hp: HParams) -> None:
    if hp.learning_rate_schedule not in SCHEDULES:
        raise UserError(f"hparam learning_rate_schedule='{hp.learning_rate_schedule}': use one of {SCHEDULES}")
    if hp.optimizer not in OPTIMIZERS:
        raise UserError(f"hparam optimizer='{hp.optimizer}': use one of {OPTIMIZERS}")


def learning_rate(hp: HParams, step: tf.Tensor, train_steps: int | None = None) -> tf.Tensor:
    """The learning rate at `step`: a linear warmup to `learning_rate`, then the schedule.

    rsqrt_decay: learning_rate * sqrt(warmup_steps / step) after warmup (T5 pre-training);
    linear_decay: falls linearly to 0 at `decay_steps` (or the run's train_steps);
    constant: learning_rate throughout (T5 fine-tuning).
    """
    check(hp)
    step = tf.cast(step, tf.float32) + 1.0
    warmup = float(max(hp.warmup_steps, 0))
    peak = tf.constant(hp.learning_rate, tf.float32)
    ramp = tf.minimum(1.0, step / warmup) if warmup > 0 else tf.constant(1.0)
    if hp.learning_rate_schedule == "constant":
        return peak * ramp
    if hp.learning_rate_schedule == "rsqrt_decay":
        return peak * ramp * tf.math.rsqrt(tf.maximum(step, max(warmup, 1.0)) / max(warmup, 1.0))
    decay_steps = hp.decay_steps or train_steps
    if not decay_steps:
        raise UserError("learning_rate_schedule=linear_decay needs hparam decay_steps or --train_steps")
    return peak * ramp * tf.maximum(0.0, 1.0 - step / float(decay_steps))


def optimizer(hp: HParams, lr: tf.Tensor) -> mtf.optimize.Optimizer:
    check(hp)
    if hp.optimizer == "adafactor":
        return ADAFACTOR(learning_rate=lr)
    return mtf.optimize.AdamWeightDecayOptimizer(
        learning_rate=lr,
        weight_decay_rate=hp.weight_decay,
        beta_1=hp.adam_beta1,
        beta_2=hp.adam_beta2,
        epsilon=hp.adam_epsilon,
    )
