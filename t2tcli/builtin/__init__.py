"""The built-in problems and hparams sets, as `t2tcli.builtin.problems` / `.hparams`.

The repository keeps them at its top level (`problems/`, `hparams/`) where users read them
first; the wheel installs them here, inside the package, so no generic top-level
`problems` or `hparams` module lands in site-packages. In a checkout run without
installing (`bin/t2t-*`), the repository's top level joins this package's search path,
so the same names import from either place.
"""

from pathlib import Path

_here = Path(__file__).resolve().parent
_checkout = _here.parent.parent
if not (_here / "problems").is_dir() and (_checkout / "problems" / "__init__.py").is_file():
    __path__.append(str(_checkout))  # noqa: F821 - a package's module-level __path__
