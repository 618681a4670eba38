"""`import tensor2tensor...` in user code, served by t2tcli.t2t_compat when T2T is absent.

tensor2tensor no longer installs on current Python and TensorFlow, so a T2T user dir's
imports would stop it at ModuleNotFoundError. While user code is imported, a finder
placed last on sys.meta_path maps `tensor2tensor[.x.y]` to `t2tcli.t2t_compat.tensor2tensor[.x.y]`;
it is placed only when no real tensor2tensor can be found, and last, so it never shadows
one. Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

PACKAGE = "tensor2tensor"
LAYER = "t2tcli.t2t_compat.tensor2tensor"


class _Alias(importlib.abc.Loader):
    """Loads `tensor2tensor` as the layer package itself, and names each of its (eagerly
    imported) submodules `tensor2tensor.x.y` too, so each class exists once."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the shared module; give it back its own.
        module.__spec__ = self.own_spec
        for name, loaded in list(sys.modules.items()):
            if name.startswith(self.target + "."):
                sys.modules.setdefault(PACKAGE + name[len(LAYER) :], loaded)


class LayerFinder(importlib.abc.MetaPathFinder):
    """Finds `tensor2tensor` and its submodules in t2tcli's compatibility layer."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        layer_name = LAYER + fullname[len(PACKAGE) :]
        try:
            layer_spec = importlib.util.find_spec(layer_name)
        except ModuleNotFoundError:
            return None
        if layer_spec is None:
            raise ModuleNotFoundError(
                f"No module named '{fullname}': of tensor2tensor, t2tcli serves only utils.registry, "
                "data_generators.problem / text_problems, models.transformer and layers.common_hparams",
                name=fullname,
            )
        return importlib.machinery.ModuleSpec(
            fullname, _Alias(layer_name), is_package=layer_spec.submodule_search_locations is not None
        )


def real_tensor2tensor_installed() -> bool:
    """Whether an importable tensor2tensor exists other than this layer."""
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None:
        return not getattr(loaded, "__name__", "").startswith(LAYER)
    return importlib.util.find_spec(PACKAGE) is not None


@contextlib.contextmanager
def served_while_importing() -> Iterator[None]:
    """Within: `import tensor2tensor...` finds the layer, unless a real tensor2tensor exists."""
    if any(isinstance(f, LayerFinder) for f in sys.meta_path) or real_tensor2tensor_installed():
        yield
        return
    finder = LayerFinder()
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
