"""Take ft_launcher's ``--ft-*`` options out of a command line, and read ``--tee``.

Both need a look at the tokens before argparse: the ``--ft-*`` family is open-ended
(each one must be named in its own error, not argparse's generic one), and ``--tee``
is slurm-ft's switch (no value) as well as torchrun's ``--tee 3``: the token after it is
its value only when it reads as a stream spec (``0``-``3`` or ``0:1,1:2``), so
``--tee train.py`` still runs ``train.py``. Scanning stops at the first positional
token (the script): what follows belongs to the script, untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_ft.settingsyntax import looks_like_spec

OPTIONAL_VALUE = ("--tee", "-t")
FT_PREFIXES = ("--ft-", "--ft_")


def is_ft_option(token: str) -> bool:
    """ft_launcher's family; its table (``ftlauncher``) loads only for a command line that
    has one, so a plain launch does not pay for it."""
    return token.startswith(FT_PREFIXES)


@dataclass
class Split:
    """The command line cut in two: what argparse reads and the ``--ft-*`` options it never sees."""

    launcher: list[str] = field(default_factory=list)  # for argparse: options, script, its args
    ft: list[tuple[str, str | None]] = field(default_factory=list)  # (as written, value)


def split(
    argv: Sequence[str], takes_value: Mapping[str, bool], is_spec: Callable[[str], bool] = looks_like_spec
) -> Split:
    """``takes_value``: every launcher option string -> whether it consumes a value."""
    out = Split()
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            out.launcher.extend(argv[i:])
            return out
        name, eq, value = tok.partition("=")
        if is_ft_option(name):
            from slurm_ft.compat import ftlauncher

            if eq:
                out.ft.append((name, value))
                i += 1
            elif ftlauncher.takes_value(name):
                out.ft.append((name, argv[i + 1] if i + 1 < len(argv) else None))
                i += 2
            else:
                out.ft.append((name, None))
                i += 1
            continue
        if name in OPTIONAL_VALUE and not eq:
            if i + 1 < len(argv) and is_spec(argv[i + 1]):
                out.launcher.append(f"{name}={argv[i + 1]}")
                i += 2
            else:
                # "--tee=" (empty): argparse would take the next token as the value.
                out.launcher.append(f"{name}=")
                i += 1
            continue
        out.launcher.append(tok)
        if not eq and takes_value.get(name, False) and i + 1 < len(argv):
            out.launcher.append(argv[i + 1])
            i += 2
        else:
            i += 1
    return out
