"""tensor2tensor.utils.t2t_model: `T2TModel`, whose subclasses cannot run here.

t2tcli trains one model, mesh-tf's Transformer; a user's own model is refused by name
when its class is defined, with what to do instead.
"""

from __future__ import annotations

from typing import Any

from t2tcli.errors import UserError


def refuse_model(cls: type, how: str) -> UserError:
    """The one-line refusal of a user's model class."""
    from t2tcli.t2t_compat.problem_adapter import where

    return UserError(
        f"{where(cls)}: model {cls.__name__} ({how}) cannot run here: t2tcli trains only its mesh-tf "
        "Transformer; remove the model from the user dir and train with --model=transformer, sized by --hparams_set"
    )


class T2TModel:
    """The base of T2T's models; defining a subclass is refused (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise refuse_model(cls, "a T2TModel subclass")
