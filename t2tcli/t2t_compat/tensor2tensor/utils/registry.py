"""tensor2tensor.utils.registry: T2T's decorators, registering into t2tcli's one registry.

`register_problem` registers a T2T text problem as a Problem here (under T2T's name, the
class name in snake_case) and returns the class unchanged; `register_hparams` registers
a set that returns T2T-style hparams, converted to the mesh-tf Transformer's when used,
and returns the function unchanged, so the user's own code can call it as in T2T.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from t2tcli import registry as toolkit_registry
from t2tcli.errors import UserError
from t2tcli.hparams import HParams
from t2tcli.t2t_compat import hparams_convert, problem_adapter
from t2tcli.t2t_compat.t2t_hparams import T2THParams
from t2tcli.t2t_compat.tensor2tensor.utils.t2t_model import refuse_model


def _decorator(add: Callable[[Any, str | None], Any], name_or_obj: Any) -> Any:
    """Both spellings T2T allows: `@register_x` and `@register_x("name")`."""
    if name_or_obj is None or isinstance(name_or_obj, str):
        return lambda obj: add(obj, name_or_obj)
    return add(name_or_obj, None)


def register_problem(name: Any = None) -> Any:
    def add(cls: type, key: str | None) -> type:
        key = key or toolkit_registry.snake_case(cls.__name__)
        toolkit_registry.register_problem(key)(problem_adapter.adapt(cls, key))
        cls.REGISTERED_NAME = key
        return cls

    return _decorator(add, name)


def register_hparams(name: Any = None) -> Any:
    def add(fn: Callable[[], Any], key: str | None) -> Callable[[], Any]:
        key = key or fn.__name__

        @functools.wraps(fn)
        def converted() -> HParams:
            made = fn()
            if isinstance(made, HParams):
                return made
            if not isinstance(made, T2THParams):
                raise UserError(
                    f"hparams set '{key}' ({problem_adapter.where(fn)}) returned {type(made).__name__}; "
                    "return the hparams built from transformer.transformer_base() or common_hparams.basic_params1()"
                )
            return hparams_convert.convert(made, key)

        toolkit_registry.register_hparams(key)(converted)
        return fn

    return _decorator(add, name)


def register_model(name: Any = None) -> Any:
    def add(cls: type, key: str | None) -> type:
        raise refuse_model(cls, "register_model")

    return _decorator(add, name)
