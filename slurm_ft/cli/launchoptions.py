"""slurm-ft-launch's command line: its parser, built from the option table
(:mod:`slurm_ft.cli.launchtable`), and the reading of one command line into settings
overrides (no environment, no topology). torchrun's flags are parsed by
:mod:`slurm_ft.compat.torchrun` and NVIDIA ft_launcher's ``--ft-*`` options by
:mod:`slurm_ft.compat.ftlauncher` (loaded only when one is given).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.cli.launchtable import GROUPS, SETTING_OF, Option, setting_defaults, shown_default
from slurm_ft.cli.usage import UsageError, UsageParser

if TYPE_CHECKING:
    from slurm_ft.compat.ftvalues import Translation
    from slurm_ft.compat.torchrun import Request

PROG = "slurm-ft-launch"

AddArgument = Callable[..., argparse.Action]  # a parser's or a group's add_argument


def option_names() -> dict[str, str]:
    """Settings key -> the option that sets it (``--max-restarts``), for error messages
    that name where a bad value came from."""
    names = {
        o.setting: next(f for f in o.flags if f.startswith("--"))
        for g in GROUPS
        for o in g.options
        if o.setting
    }
    names.update({"applog.tee": "--tee", "applog.tee_streams": "--tee", "health.checks": "--health-checks"})
    return names


def _help(option: Option, defaults: Mapping[str, object]) -> str | None:
    shown = shown_default(option, defaults)
    if option.help is None or shown is None:
        return option.help
    plain = shown.replace("`", "").replace(" (off)", ": off")
    return f"{option.help} (default {plain})".replace("%", "%%")


def _add(add: AddArgument, option: Option, defaults: Mapping[str, object]) -> None:
    text = _help(option, defaults)
    if option.takes == "flag":
        add(*option.flags, dest=option.dest, help=text, action="store_true")
    elif option.takes == "switch":
        add(*option.flags, dest=option.dest, help=text, action="store_const", const=True)
    elif option.takes == "optional":
        add(*option.flags, dest=option.dest, help=text, metavar=option.metavar, nargs="?", const="")
    else:
        add(*option.flags, dest=option.dest, help=text, metavar=option.metavar, choices=option.choices)


def build_parser() -> argparse.ArgumentParser:
    from slurm_ft.compat.torchrun import REFUSED

    p = UsageParser(
        prog=PROG,
        usage="%(prog)s [options] SCRIPT [args...] | -m MODULE [args...] | --no-python CMD [args...]",
        description="Per-node launcher with in-job restarts coordinated across all nodes "
        "(run it under 'srun --ntasks-per-node=1').",
        allow_abbrev=False,
        epilog="torchrun's other flags and NVIDIA ft_launcher's --ft-* options (and --ft-cfg-path) "
        "are accepted too; the compatibility table of the docs (reference/compat) says what each "
        "one does here.",
    )
    defaults = setting_defaults()
    for group in GROUPS:
        if group.exclusive:
            # torchrun's refused flags first: hidden, they only need to be recognised
            for refused in REFUSED:
                action = "store_true" if refused.switch else "store"
                p.add_argument(*refused.flags, dest=refused.dest, action=action, help=argparse.SUPPRESS)
        # Every group a section of --help, as the README groups them (~60 options).
        section = p.add_argument_group(group.title)
        add: AddArgument = section.add_argument
        if group.exclusive:
            add = section.add_mutually_exclusive_group().add_argument
        for option in group.options:
            _add(add, option, defaults)
    p.add_argument("target", metavar="SCRIPT", help="training script (or module, or command)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def takes_value_table(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Every option string -> whether it consumes the next token (for compat.argv.split)."""
    out: dict[str, bool] = {}
    for action in parser._actions:  # argparse has no public list of its actions
        for opt in action.option_strings:
            out[opt] = action.nargs != 0
    return out


def settings_overrides(ns: argparse.Namespace) -> dict[str, object]:
    """The command-line layer of the settings: only the options actually given."""
    out: dict[str, object] = {
        key: getattr(ns, dest) for dest, key in SETTING_OF.items() if getattr(ns, dest) is not None
    }
    if ns.tee == "":  # --tee alone: echo to the console
        out["applog.tee"] = True
    elif ns.tee is not None:  # torchrun's --tee SPEC
        out["applog.tee_streams"] = ns.tee
    if ns.shutdown_timeout is not None:
        out.setdefault("launch.workers_stop_timeout", ns.shutdown_timeout)
        out.setdefault("launch.term_timeout", ns.shutdown_timeout)
    if ns.health_checks is not None:
        text = ns.health_checks.strip().lower()
        out["health.checks"] = [] if text == "none" else ns.health_checks
    return out


@dataclass
class Interpreted:
    """The command line read: argparse's namespace, torchrun's request, ft_launcher's
    translation (None: no ``--ft-*`` option) and the settings overrides they make
    (command-line layer)."""

    ns: argparse.Namespace
    request: Request
    ft: Translation | None
    cli: dict[str, object]


def interpret(args: list[str], read_yaml: Callable[[str], object] | None = None) -> Interpreted:
    """Parse ``args`` (no environment, no topology): every flag either lands in ``cli``
    or the request, or raises UsageError/CompatError. ``read_yaml(path)`` loads the
    ``--ft-cfg-path`` file (default: yaml.safe_load of it)."""
    from slurm_ft.compat import argv as compat_argv
    from slurm_ft.compat import torchrun

    parser = build_parser()
    split = compat_argv.split(args, takes_value_table(parser))
    ns = parser.parse_args(split.launcher)
    for refused in torchrun.REFUSED:
        refused.check(getattr(ns, refused.dest))
    request = torchrun.parse(
        torchrun.TorchrunFlags(
            nnodes=ns.nnodes,
            node_rank=ns.node_rank,
            master_addr=ns.master_addr,
            master_port=ns.master_port,
            rdzv_endpoint=ns.rdzv_endpoint,
            rdzv_id=ns.rdzv_id,
            rdzv_backend=ns.rdzv_backend,
            rdzv_conf=ns.rdzv_conf,
            standalone=ns.standalone,
            local_addr=ns.local_addr,
        )
    )
    ft = _translate_ft(split.ft, read_yaml) if split.ft else None
    cli: dict[str, object] = {**(ft.overrides if ft else {}), **request.overrides, **settings_overrides(ns)}
    return Interpreted(ns, request, ft, cli)


def _translate_ft(
    options: list[tuple[str, str | None]], read_yaml: Callable[[str], object] | None
) -> Translation:
    from slurm_ft.compat import ftlauncher

    section: Mapping[str, object] | None = None
    cfg_path = ftlauncher.config_path(options)
    if cfg_path is not None:
        doc = (read_yaml or _read_ft_yaml)(cfg_path)
        section = ftlauncher.find_section(doc)
        if section is None:
            raise UsageError(f"--ft-cfg-path {cfg_path}: no '{ftlauncher.YAML_SECTION}:' section in the file")
    return ftlauncher.translate(options, section, source=f"{cfg_path}: fault_tolerance")


def _read_ft_yaml(path: str) -> object:
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--ft-cfg-path {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise UsageError(f"--ft-cfg-path {path}: not valid YAML") from None
