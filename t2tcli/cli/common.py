"""Start-up shared by the binaries: flag parsing, user code, clean error exits.

TensorFlow is not imported here: every module that needs it imports t2tcli.compat
first, so a binary that never touches TensorFlow (t2t-datagen on CSV data,
--registry_help) starts in about a second.
"""

from __future__ import annotations

import logging as stdlib_logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from absl import app, logging

from t2tcli import interrupts, registry
from t2tcli.cli import help, t2t_names
from t2tcli.cli.flags import FLAGS
from t2tcli.errors import UserError


def prog_name() -> str:
    return os.path.basename(sys.argv[0]) or "t2t"


def fail(message: str) -> None:
    """Prints '<binary>: error: <message>' and exits 1."""
    print(f"{prog_name()}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def stopped(exc: interrupts.Interrupted) -> None:
    """Prints '<binary>: <what happened>' and exits as a shell reports the signal (128 + its number)."""
    print(f"{prog_name()}: {exc}", file=sys.stderr, flush=True)
    sys.exit(exc.exit_status)


def require(*names: str) -> None:
    for name in names:
        if not getattr(FLAGS, name):
            raise UserError(f"--{name} is required")


def run(main: Callable[[], None]) -> None:
    """Runs `main` under absl: unknown flags are errors; UserError is one line, exit 1."""
    if help.wants_help(sys.argv):
        help.print_help(prog_name(), main.__module__)
        sys.exit(0)
    try:
        sys.argv = t2t_names.rewrite(sys.argv, set(FLAGS))
    except UserError as exc:
        fail(str(exc))

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
        interrupts.install()
        try:
            t2t_names.check_model(FLAGS.model)
            for usr_dir in FLAGS.usr_dir:
                registry.import_usr_dir(usr_dir)
            if FLAGS.registry_help:
                print(registry.registry_help())
                return
            if FLAGS.hparams_help:
                print(hparams_help())
                return
            main()
        except UserError as exc:
            fail(str(exc))
        except interrupts.Interrupted as exc:
            stopped(exc)
        except KeyboardInterrupt:
            stopped(interrupts.Interrupted(signal.SIGINT))
        except BrokenPipeError:  # e.g. `t2t-decode ... | head`: the reader has gone
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:  # the file system said no (full disk, permissions, a path that is a file)
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")

    try:
        app.run(wrapped, flags_parser=_parse_flags)
    except SystemExit as exc:
        _end_before_plugin_teardown(exc.code)
        raise
    except BaseException:
        if "tensorflow_io" in sys.modules:
            traceback.print_exc()
            _end_before_plugin_teardown(1)
        raise


def _end_before_plugin_teardown(code: int | str | None) -> None:
    """Ends the process here, output flushed, once tensorflow-io's file systems (s3://...)
    are loaded: tensorflow-io 0.36 (the release for TensorFlow 2.15) aborts the interpreter's
    own teardown after any use of them ("pure virtual method called", exit 134), which would
    turn every successful run into a failed one."""
    if "tensorflow_io" not in sys.modules:
        return
    if isinstance(code, str):
        print(code, file=sys.stderr)
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def hparams_help() -> str:
    """--hparams_help: every hparam of --hparams_set (with --hparams applied), or of
    --model_dir's run, one per line with what it means."""
    from t2tcli.hparams import DESCRIPTIONS
    from t2tcli.io import fs
    from t2tcli.model import run_records

    if FLAGS.hparams_set:
        hp = registry.hparams(FLAGS.hparams_set).parse(FLAGS.hparams)
        doc = (registry.hparams_function(FLAGS.hparams_set).__doc__ or "").strip().splitlines()
        title = f"hparams set {FLAGS.hparams_set}" + (f": {doc[0]}" if doc else "")
    elif FLAGS.model_dir and fs.exists(os.path.join(FLAGS.model_dir, run_records.RUN_FILE)):
        info, hp, _ = run_records.load(FLAGS.model_dir)
        hp.parse(FLAGS.hparams)
        title = f"hparams of {FLAGS.model_dir} (set {info.hparams_set})"
    else:
        raise UserError("--hparams_help needs --hparams_set=NAME (or the --model_dir of a run)")
    width = max(len(k) for k in hp)
    lines = [title + (f", with --hparams={FLAGS.hparams}" if FLAGS.hparams else "")]
    for key in sorted(hp):
        value = hp.get(key)
        shown = f"{value!r}" if isinstance(value, str) else str(value)
        lines.append(f"  {key:<{width}} = {shown:<14} {DESCRIPTIONS.get(key, '')}".rstrip())
    return "\n".join(lines)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return FLAGS(argv)
    except Exception as exc:  # absl's flags.Error and friends
        fail(str(exc).splitlines()[0])
        raise
