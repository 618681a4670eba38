"""What t2t-decoder and t2t-exporter say about --hparams_set, which a trained model_dir fixes.

tensor2tensor's scripts pass --hparams_set to every binary; here a model_dir's recorded
run decides the model, so a different name is warned about once rather than silently
ignored (and never applied: the weights were trained with the recorded one).
"""

from __future__ import annotations

from absl import logging

from t2tcli.model.run_records import RunInfo


def set_names(info: RunInfo) -> set[str]:
    """The names the run's hparams set goes by: the one resolved and the one its flag gave."""
    names = {info.hparams_set}
    given = info.flags.get("hparams_set") if isinstance(info.flags, dict) else None
    if isinstance(given, str) and given:
        names.add(given)
    return {name for name in names if name}


def given_set_name(info: RunInfo) -> str:
    """The hparams set name the run was started with (its flag's, else the recorded one)."""
    given = info.flags.get("hparams_set") if isinstance(info.flags, dict) else None
    return given if isinstance(given, str) and given else info.hparams_set


def warn_if_other_set(hparams_set: str | None, info: RunInfo, model_dir: str) -> bool:
    """Logs one warning when --hparams_set names a set other than the run's; returns whether it did."""
    names = set_names(info)
    if not hparams_set or not names or hparams_set in names:
        return False
    logging.warning(
        "--hparams_set=%s differs from the hparams set %s of --model_dir=%s was trained with; using the run's",
        hparams_set,
        given_set_name(info),
        model_dir,
    )
    return True
