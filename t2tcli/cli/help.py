"""--help as a user needs it: this binary's flags, then the shared ones, each on one line.

absl's own --help shows only the flags of the script's module (none: ours are defined in
t2tcli) and --helpfull buries them among TensorFlow's and TPU's; --helpfull still
lists everything.
"""

from __future__ import annotations

import sys
import textwrap

from absl import flags

from t2tcli.cli import t2t_names
from t2tcli.cli.flags import FLAGS

HELP_FLAGS = ("--help", "-h", "-?", "--helpshort")
_WIDTH = 100


def wants_help(argv: list[str]) -> bool:
    return any(arg in HELP_FLAGS for arg in argv[1:])


def _flag_lines(module: str) -> list[str]:
    entries = []
    taken = t2t_names.taken(set(FLAGS))
    for flag in sorted(FLAGS.flags_by_module_dict().get(module, []), key=lambda f: f.name):
        default = "" if flag.default in (None, "", []) else f" (default: {flag.default_as_str.strip(chr(39))})"
        name = f"--{flag.name}" if not isinstance(flag, flags.BooleanFlag) else f"--[no]{flag.name}"
        aliases = [alias for alias, target in taken.items() if target == flag.name]
        also = f" Also --{', --'.join(aliases)} (tensor2tensor's name)." if aliases else ""
        entries.append((name, flag.help.replace("\n", " ") + also + default))
    width = max((len(name) for name, _ in entries), default=0) + 4
    return [
        textwrap.fill(text, _WIDTH, initial_indent=f"  {name:<{width - 2}}", subsequent_indent=" " * width)
        for name, text in entries
    ]


def help_text(prog: str, module: str, description: str) -> str:
    """The --help of the binary whose flags live in `module`."""
    parts = [description.strip(), "", f"{prog} flags:", *_flag_lines(module), "", "Shared flags:"]
    parts += _flag_lines("t2tcli.cli.flags")
    parts += [
        "",
        "Logging:",
        "  -v N, --verbosity=N       1 shows TensorFlow's own log lines and the per-batch debug lines.",
        "",
        "--helpfull lists every flag, TensorFlow's included.",
    ]
    return "\n".join(parts)


def print_help(prog: str, module: str) -> None:
    description = sys.modules[module].__doc__ or prog
    print(help_text(prog, module, description))
