"""tensor2tensor's --schedule values, each run as this toolkit runs that work or refused in one line.

T2T's schedules are methods of its Experiment; here training and its dev evaluation are
t2t-trainer's, checkpoint metrics are t2t-eval's and decoding is t2t-decoder's, so a
schedule maps to one of those or names the binary that does its work.
"""

from __future__ import annotations

from t2tcli.errors import UserError, did_you_mean

# A training schedule -> the trainer's own schedule that does its work.
TRAINER: dict[str, str] = {
    "train": "train",
    "train_and_evaluate": "train_and_evaluate",
    "continuous_train_and_eval": "train_and_evaluate",
    "test": "train_and_evaluate",  # one step, then one dev batch
}
# Schedules that only evaluate checkpoints: t2t-eval's work.
EVALUATING = ("evaluate", "continuous_eval")
_TRAIN_SPLIT = "t2t-eval scores the dev or test split (--split=dev|test), not the training data"
_DECODING = (
    "decoding is t2t-decoder's (--decode_from_file=FILE, or the dev split with --decode_hparams=num_samples=N); "
    "t2t-eval --wait decodes and scores each new checkpoint"
)
# Schedules this toolkit does not run as a trainer schedule -> what to do instead.
REFUSED: dict[str, str] = {
    "evaluate_on_train_data": _TRAIN_SPLIT,
    "continuous_eval_on_train_data": _TRAIN_SPLIT,
    "train_eval_and_decode": "use --schedule=train_and_evaluate, and t2t-eval for the decoded metrics",
    "run_std_server": "a parameter server is a TF_CONFIG task of type ps running t2t-trainer with the chief's flags",
    "decode": _DECODING,
    "continuous_decode": _DECODING,
    "continuous_decode_on_train_data": _DECODING,
    "continuous_decode_on_eval_data": _DECODING,
    "continuous_decode_from_file": _DECODING,
}
ALL = (*TRAINER, *EVALUATING, *REFUSED)
# tensor2tensor's defaults, which its trainer's name keeps.
T2T_TRAINER = "t2t-trainer"
T2T_DEFAULT = "continuous_train_and_eval"
T2T_EVAL_STEPS = 100


def resolve(given: str | None, prog: str, eval_flags_given: bool) -> str:
    """The schedule to run: the one given, else t2t-trainer's T2T default, else train (or
    train_and_evaluate when an evaluation flag asks for evaluation)."""
    if given in REFUSED:
        raise UserError(f"--schedule={given} is not a t2t-trainer schedule here: {REFUSED[given]}")
    if given:
        if given not in ALL:
            raise UserError(
                f"--schedule={given}: unknown{did_you_mean(given, ALL)} (one of {', '.join((*TRAINER, *EVALUATING))})"
            )
        return given
    if prog == T2T_TRAINER:
        return T2T_DEFAULT
    return "train_and_evaluate" if eval_flags_given else "train"
