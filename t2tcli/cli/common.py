"""Start-up shared by the binaries: flag parsing, user code, clean error exits.

TensorFlow is not imported here: every module that needs it imports t2tcli.compat
first, so a binary that never touches TensorFlow (t2t-datagen on CSV data,
--registry_help) starts in about a second.
"""

from __future__ import annotations

import logging as stdlib_logging
import os
import sys
from collections.abc import Callable

from absl import app, logging

from t2tcli import registry
from t2tcli.errors import UserError
from t2tcli.flags import FLAGS


def prog_name() -> str:
    return os.path.basename(sys.argv[0]) or "t2t"


def fail(message: str) -> None:
    """Prints '<binary>: error: <message>' and exits 1."""
    print(f"{prog_name()}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def require(*names: str) -> None:
    for name in names:
        if not getattr(FLAGS, name):
            raise UserError(f"--{name} is required")


def run(main: Callable[[], None]) -> None:
    """Runs `main` under absl: unknown flags are errors; UserError is one line, exit 1."""

    def wrapped(argv: list[str]) -> None:
        if len(argv) > 1:
            fail(f"unexpected argument(s): {' '.join(argv[1:])} (flags take the form --name=value)")
        if FLAGS["verbosity"].present == 0:
            logging.set_verbosity(logging.INFO)
        handler = logging.get_absl_handler()
        handler.use_absl_log_file = False
        if not FLAGS["verbosity"].present:
            # absl's default prefix (thread id, file:line) is for developers; users get time + level.
            handler.setFormatter(stdlib_logging.Formatter("%(asctime)s %(levelname).1s %(message)s", "%H:%M:%S"))
        try:
            for usr_dir in FLAGS.usr_dir:
                registry.import_usr_dir(usr_dir)
            if FLAGS.registry_help:
                print(registry.registry_help())
                return
            main()
        except UserError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            fail("interrupted")
        except BrokenPipeError:  # e.g. `t2t-decode ... | head`: the reader has gone
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)

    app.run(wrapped, flags_parser=_parse_flags)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return FLAGS(argv)
    except Exception as exc:  # absl's flags.Error and friends
        fail(str(exc).splitlines()[0])
        raise
