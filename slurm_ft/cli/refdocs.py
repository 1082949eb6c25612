"""The reference of every command, read off its parser: the option tables of the docs'
reference pages and the man pages come from here, so neither can drift from ``--help``.

Each command's parser (``build_parser`` of its ``slurm_ft.cli`` module) gives the options,
their spellings, what they take and their short help. This module adds what a parser does
not hold: the synopsis lines, a fuller meaning where the one-line help is not enough
(:data:`DETAILS`; slurm-ft-launch's are :data:`slurm_ft.cli.launchdocs.MEANING`), the
setting an option sets, and the exit codes. Loaded only to render or test the docs and the
man pages, never by a command.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from typing import NamedTuple


class Command(NamedTuple):
    prog: str
    module: str  # slurm_ft.cli.<module>.build_parser()
    summary: str  # the man page's NAME line
    synopsis: tuple[str, ...]  # usage lines, without the program name
    exit_codes: tuple[tuple[str, str], ...]  # (code, meaning in markdown)


COMMANDS: tuple[Command, ...] = (
    Command(
        "slurm-ft-launch",
        "launchoptions",
        "per-node launcher with in-job restarts coordinated across all nodes",
        (
            "[options] SCRIPT [args...]",
            "[options] -m|--module MODULE [args...]",
            "[options] --no-python CMD [args...]",
        ),
        (
            ("0", "every worker on every node finished"),
            (
                "1",
                "restart budget spent, a launcher was lost (and no spare was left to replace it) or "
                "left (the outcome's `lost_nodes`), node 0 was lost, or every rendezvous port of "
                "the job was in use",
            ),
            (
                "2",
                "bad input: usage, settings, `SLURM_*` topology, missing script, unwritable state "
                "dir; one line on stderr, nothing started",
            ),
            ("93", "the no-progress guard stopped the job (every launcher)"),
            (
                "94",
                "a node failed its health check before a join or while its workers trained "
                "(`--health-check-interval`; without a spare to take its place), or its workers "
                "outlived SIGKILL "
                "(`launch.kill_timeout`), or its state dir stopped answering ([a file system that "
                "stops answering](../guides/nfs-lustre.md#a-file-system-that-stops-answering)): "
                "**every** launcher "
                "of the attempt exits 94 without waiting for the join timeout, and the outcome "
                "record lists the node(s) in `unhealthy_nodes`",
            ),
            ("128+N", "this launcher received signal N (forwarded to the workers)"),
        ),
    ),
    Command(
        "slurm-ft-healthcheck",
        "healthcheck",
        "node health check: NIC link state, storage paths and mounts, GPUs, in bounded time",
        ("[options]",),
        (
            ("0", "healthy: no check failed (warnings and skips allowed)"),
            ("94", "unhealthy: at least one check failed"),
            (
                "2",
                "bad input: a relative path, an unknown check name, a bad glob, an unreadable or "
                "invalid config, invalid `SLURM_*` variables; one line on stderr",
            ),
        ),
    ),
    Command(
        "slurm-ft-progress",
        "progress",
        "stop restart and requeue loops that make no progress",
        (
            "status [--json] [options]",
            "check [--json] [options]",
            "reset [--yes] [options]",
        ),
        (
            (
                "0",
                '`status`: shown (also "no history"). `check`: another attempt may run, '
                'including "no history" (the launcher never wrote a ledger, or the state dir '
                "does not exist yet) and tracking off (K <= 0, no source, or a source that has not "
                "existed at any cycle boundary). `reset`: done, or nothing to reset.",
            ),
            ("1", "`reset`: the operator answered no at the prompt; nothing changed."),
            (
                "2",
                "bad input, one line on stderr (`slurm-ft-progress: ...`): usage errors; invalid "
                "settings, config file or `SLURM_*` variables; a corrupt or unreadable ledger; a "
                "state dir that is not a readable directory; `status`/`reset` with a state dir "
                "that does not exist; outside a Slurm job without `--state-dir` when "
                "`./.slurm_ft/standalone` does not exist; `reset` without `--yes` when stdin is "
                "not a terminal.",
            ),
            ("93", "`check`: no progress in the last K cycles: do not requeue."),
        ),
    ),
    Command(
        "slurm-ft-report",
        "report",
        "where the allocation went: attempts, cycles, failures, goodput",
        (
            "[--state-dir DIR | JOBID] [--json | --summary] [--svg FILE] [--html FILE] [--config FILE]",
            "[--state-dir DIR | JOBID] --processes [--json]",
        ),
        (
            (
                "0",
                "shown, also when some records could not be read: the report names each such file "
                "and what is wrong with it, and uses the rest",
            ),
            (
                "2",
                "bad input, one line on stderr: usage, a state dir that does not exist or holds no "
                "records, an output file that cannot be written",
            ),
        ),
    ),
    Command(
        "slurm-ft-drill",
        "drill",
        "inject real faults into a running slurm-ft job and record them",
        (
            "JOBID|--state-dir DIR FAULT [--rank R | --node N] [--at T]",
            "JOBID|--state-dir DIR --schedule FILE",
            "JOBID|--state-dir DIR --every S [--mix M] --seed K [--duration D] [--plan]",
        ),
        (
            ("0", "every fault was sent (or skipped and recorded), or the job stopped running first"),
            (
                "2",
                "refused before anything is sent, one line on stderr: an unknown fault, a rank or "
                "node outside the job, a schedule or mix that does not parse, a job that is not "
                "running, not the caller's, or not a slurm-ft job, `preempt` without Slurm",
            ),
        ),
    ),
    Command(
        "slurm-ft-logs",
        "logs",
        "read a job's cycle logs: select, merge, collapse and follow them; why a cycle failed",
        (
            "[JOBID | --state-dir DIR] [--cycle N] [--attempt A] [--rank LIST] [--node NAME|HOSTLIST]",
            "    [--grep REGEX] [--head N | --tail N] [--node-prefix] [--collapse[=numbers]]",
            "    [--failure] [-f] [--list] [--json] [--config FILE]",
        ),
        (
            ("0", "shown (also when nothing matched)"),
            (
                "2",
                "bad input, one line on stderr: usage, an unknown job, a cycle or attempt that does "
                "not exist, a directory that is not a state dir, a rank or node that was not in "
                "the cycle, a cycle that has no log file because the launcher ran without "
                "`--applog-prefix`",
            ),
            ("130", "interrupted (^C; also how `-f` is ended by hand)"),
        ),
    ),
    Command(
        "slurm-ft-snapshot",
        "snapshot",
        "the launchers' persisted snapshots for other tools",
        ("export FILE OUT",),
        (
            ("0", "written"),
            (
                "2",
                "bad input, one line on stderr: usage, a file that is not a whole snapshot, an "
                "output that cannot be written",
            ),
        ),
    ),
)

# The setting each option of a command other than the launcher sets (the launcher's own
# option table names its settings). A unit test checks these against the commands' code.
SETTINGS: dict[str, dict[str, str]] = {
    "slurm-ft-healthcheck": {
        "--health-checks": "health.checks",
        "--deadline": "health.deadline",
        "--nics": "health.nics",
        "--nic-mode": "health.nic_mode",
        "--sysfs-root": "health.sysfs_root",
        "--proc-root": "health.proc_root",
        "--paths": "health.paths",
        "--write-probe": "health.write_probe",
        "--discover-mounts": "health.discover_mounts",
        "--no-discover-mounts": "health.discover_mounts",
        "--gpus": "health.gpus",
        "--gpu-foreign-memory-tolerance-mib": "health.gpu_foreign_memory_tolerance_mib",
        "--drain": "health.drain",
        "--scontrol": "health.scontrol",
    },
    "slurm-ft-progress": {
        "--state-dir": "state_dir",
        "--max-no-progress-cycles": "progress.max_no_progress_cycles",
        "--min-progress-iterations": "progress.min_progress_iterations",
        "--checkpoint-iteration-file": "progress.checkpoint_iteration_file",
        "--progress-source": "progress.source",
        "--progress-pattern": "progress.pattern",
    },
    "slurm-ft-report": {"--state-dir": "state_dir"},
    "slurm-ft-logs": {"--state-dir": "state_dir"},
    "slurm-ft-drill": {},
}

# A fuller meaning than the one-line --help, where a reader needs it (markdown). Keys are
# an option's first long spelling, or a positional argument's metavar.
DETAILS: dict[str, dict[str, str]] = {
    "slurm-ft-healthcheck": {
        "--health-checks": (
            "subset of `nic,storage,gpu` (default all three); the same option name as the "
            "launcher's (`--checks` is the older spelling)"
        ),
        "--deadline": "overall time limit in seconds, counted from the command's start (default 10)",
        "--nics": "NIC names and globs (`mlx5_*`, `ib0`, `eth*`, `mlx5_[0-3]`); default: all RDMA devices",
        "--nic-mode": (
            "`absolute` (default: a standalone check has no earlier look to compare a port "
            "with) or `transition` (compared with the launcher's start-time snapshot; the "
            "launcher's default)"
        ),
        "--sysfs-root": "where sysfs is read (default `/sys`; tests point it at a fixture tree)",
        "--proc-root": "where procfs is read (default `/proc`)",
        "--paths": "absolute paths that must answer; `%n` is replaced by the Slurm node name",
        "--write-probe": "also create, fsync and remove a file in each path",
        "--discover-mounts": "probe the network mounts found in mountinfo (default on)",
        "--no-discover-mounts": "do not probe discovered mounts",
        "--gpus": "GPUs expected (default: the setting, else `SLURM_GPUS_ON_NODE`)",
        "--gpu-foreign-memory-tolerance-mib": "GPU memory other processes may hold (default 1024)",
        "--json": (
            "one JSON object: `node`, `healthy`, `duration_s`, `first_failure`, `counts`, "
            "`results[]` (`name`, `status`, `detail`, `duration_s`, `data`)"
        ),
        "--quiet": (
            "print only the `FAIL` lines (nothing when healthy); as for the launcher, `--quiet` "
            "keeps only what went wrong on the console"
        ),
        "--prom-file": "write node-exporter textfile metrics, atomically",
        "--drain": "drain this node when unhealthy; resume it on a healthy pass if slurm-ft drained it",
        "--resume": "on a healthy pass, resume this node if slurm-ft drained it",
        "--node": "Slurm node name (default `$SLURMD_NODENAME`, else the short host name)",
        "--scontrol": (
            "absolute path of scontrol (default: the first of /usr/bin, /usr/local/bin, /opt/slurm/bin)"
        ),
        "--config": (
            "YAML settings (default `$SLURM_FT_CONFIG`, else `/etc/slurm-ft/healthcheck.yaml` if it exists)"
        ),
    },
    "slurm-ft-progress": {
        "--state-dir": (
            "the job's state dir; default: found the way the launcher finds it (`SLURM_FT_STATE_DIR` "
            "or `state_dir` in the config file, else `$SLURM_SUBMIT_DIR/.slurm_ft/<job id>` in a "
            "Slurm job, else `./.slurm_ft/standalone`)"
        ),
        "--max-no-progress-cycles": (
            "stop after K consecutive cycles without progress (0 or negative: off); default: "
            "what the launcher recorded in the ledger"
        ),
        "--min-progress-iterations": (
            "a cycle made progress if the step grew by at least M; default: what the launcher recorded"
        ),
        "--progress-source": (
            "`iteration-file:PATH`, `checkpoint-dir:DIR` or `file:PATH`; default: the source the "
            "launcher recorded"
        ),
    },
    "slurm-ft-report": {
        "JOBID": (
            "`$SLURM_SUBMIT_DIR/.slurm_ft/JOBID` (the current directory without `SLURM_SUBMIT_DIR`), "
            "else where the job's launchers left their pointer to it (a job run with its own "
            "`--state-dir`: [state dir](state-dir.md#finding-a-job-by-its-id)); "
            "array tasks `<array id>_<task>`. Without JOBID and `--state-dir`: the state dir the "
            "launcher would use (`$SLURM_FT_STATE_DIR`, `--config`/`$SLURM_FT_CONFIG`, else "
            "`$SLURM_SUBMIT_DIR/.slurm_ft/<job id>` from the `SLURM_*` variables; outside Slurm "
            "`./.slurm_ft/standalone`)"
        ),
        "--json": "the report as JSON instead of the terminal summary (see the report JSON schema)",
        "--summary": (
            "the run in a few lines instead: nodes and workers, each cycle's outcome with the "
            "failing rank and its exception, where training resumed, the cycle logs, the outcome "
            "(what `scripts/demo` prints)"
        ),
        "--processes": (
            "instead of the report: each rank's worker pid and node, and each node's launcher pid, "
            "in the newest cycle that started workers (from the launchers' process records; with "
            "`--json`: `cycle world_size nodes[node node_rank launcher_pid workers[rank local_rank pid "
            "start_ticks]]`). The one way to find every rank's process: a warm worker's "
            "`/proc/PID/environ` holds no `RANK` ([warm restarts](../guides/warm-restarts.md))"
        ),
        "--svg": "write the timeline picture (plain SVG, opens in any browser)",
        "--html": "write a page with the picture and the totals",
    },
    "slurm-ft-logs": {
        "JOBID": (
            "which job, as for `slurm-ft-report`: `$SLURM_SUBMIT_DIR/.slurm_ft/JOBID`, else where "
            "the job's pointer leads"
        ),
        "--cycle": "the cycle to read (default: the last one)",
        "--attempt": (
            "the last cycle of attempt (requeue) `A`; with `--cycle`, check that the cycle belongs to it"
        ),
        "--rank": "only these global ranks: `0,17,100-131`",
        "--node": (
            "only the ranks that ran on these nodes in that cycle (`node[01-04]`); with per-node "
            "files only those files are read"
        ),
        "--grep": (
            "only lines whose text matches (a Python regular expression, searched; the rank prefix "
            "is not part of the text, so `--grep 17` does not pick rank 17's lines; `^` and `$` "
            "anchor at the text's start and end)"
        ),
        "--head": "the first `N` selected lines",
        "--tail": "the last `N` selected lines (with `-f`: those first, then follow)",
        "--node-prefix": "start every line with the name of the node its rank ran on",
        "--collapse": (
            "fold lines that ranks printed alike into one: `count ranks: text`, the ranks as ranges "
            "(`0-511,513-1023`), groups in the order of their first line; a line one rank printed "
            "is shown as written. `--collapse=numbers` also folds lines that differ only in "
            "numbers (loss values, step times), each number shown as its spread: `step "
            "[100..4000] loss [0.98..3.99]` (`--collapse` takes the next word as its mode, so put "
            "`JOBID` before it)"
        ),
        "--failure": (
            "why the cycle failed: the first failure from its record (rank, node, kind, exit code "
            "or signal, the hang's detector and ranks), the rank's last lines (20, or `--tail N`), "
            "its traceback (from the error file, else the last one the rank printed), for a hang "
            "the stacks the launcher kept (ranks with the same stack shown once, with their rank "
            "set), and where the full files are"
        ),
        "--follow": (
            "follow the cycle's files while the job runs (with `--tail N`: its last `N` lines "
            "first; a job without a cycle record yet: wait for its first one); at a restart move "
            "on to the next cycle; end when the launcher run writes its outcome"
        ),
        "--list": "the job's cycles: attempt, outcome, start, ranks, log files and their size, first failure",
        "--json": (
            "JSON lines for selected lines (`cycle rank node kind text`) and for `--collapse` groups "
            "(`ranks rank_count count kind text spread`); one JSON document for `--failure` and `--list`"
        ),
    },
    "slurm-ft-drill": {
        "JOBID FAULT": (
            "the job (or `--state-dir`) and the fault: `crash`, `kill`, `hang`, `freeze-launcher`, "
            "`lose-node`, `kill-launcher` (the launcher alone, and with it its node's snapshots), "
            "`preempt`. The job's state dir is `.slurm_ft/JOBID` in its working "
            "directory, else where the job's pointer leads; options may come between the words"
        ),
        "--rank": "global rank to hit (crash, kill, hang; default: the last)",
        "--node": (
            "node rank among the training nodes or a node name (default: the last; node rank 0 "
            "hosts the job's store, so losing it ends the attempt)"
        ),
        "--schedule": (
            "faults from a file: one a line, `AT FAULT [rank=R | node=N]`, `AT` in seconds after the "
            "drill starts (`90`, `90s`, `1.5m`), `#` comments"
        ),
        "--every": (
            "seeded plan: gaps between faults drawn from an exponential distribution of mean S "
            "seconds (default 120)"
        ),
        "--mix": (
            "seeded plan: `fault=weight,...` (`kill=3,hang=1`) or `llama3` (the default: Llama 3 "
            "405B's interruptions mapped onto these faults)"
        ),
        "--plan": "print the seeded plan and exit without injecting",
    },
}

HIDDEN = {"-h", "--help", "--version"}


class Entry(NamedTuple):
    """One option (or positional argument) of a command, as the reference shows it."""

    flags: tuple[str, ...]  # every spelling; empty for a positional argument
    takes: str  # what follows the option (metavar or choices), "" for none
    help: str  # argparse's help, expanded
    meaning: str  # markdown: the fuller meaning where there is one, else the help
    setting: str | None
    default: str | None = None  # markdown, where the meaning does not say it

    @property
    def name(self) -> str:
        """The first long spelling (the key of DETAILS), or the positional's metavar."""
        first = self.flags[0] if self.flags else self.takes.strip("[]")
        return next((f for f in self.flags if f.startswith("--")), first)

    @property
    def shown_flags(self) -> tuple[str, ...]:
        """The spellings --help lists: torchrun's underscore twins are accepted, not listed."""
        return tuple(f for f in self.flags if "_" not in f or f.replace("_", "-") not in self.flags)


class Section(NamedTuple):
    title: str
    entries: tuple[Entry, ...]


def command(prog: str) -> Command:
    for cmd in COMMANDS:
        if cmd.prog == prog:
            return cmd
    raise KeyError(prog)


def parser(prog: str) -> argparse.ArgumentParser:
    module = importlib.import_module(f"slurm_ft.cli.{command(prog).module}")
    built: argparse.ArgumentParser = module.build_parser()
    return built


def _takes(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        words = "|".join(str(c) for c in action.choices)
        return f"[{words}]" if action.nargs == "?" else words
    metavar = action.metavar
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    text = metavar or action.dest.upper()
    return f"[{text}]" if action.nargs == "?" else text


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {"default": action.default, "prog": "", "dest": action.dest}
    return " ".join(text.split())


def _entry(prog: str, action: argparse.Action) -> Entry:
    from slurm_ft.cli import launchdocs

    flags = tuple(action.option_strings)
    help_text = _help(action)
    name = next((f for f in flags if f.startswith("--")), flags[0] if flags else _takes(action).strip("[]"))
    if prog == "slurm-ft-launch":
        from slurm_ft.cli.launchtable import GROUPS, setting_defaults, shown_default

        option = next((o for g in GROUPS for o in g.options if name in o.flags), None)
        if option is None:
            return Entry(flags, _takes(action), help_text, help_text, None)
        meaning = launchdocs.MEANING.get(name, help_text)
        default = shown_default(option, setting_defaults())
        return Entry(flags, _takes(action), help_text, meaning, option.setting, default)
    meaning = DETAILS.get(prog, {}).get(name, help_text)
    return Entry(flags, _takes(action), help_text, meaning, SETTINGS.get(prog, {}).get(name))


def _sections_of(prog: str, p: argparse.ArgumentParser, prefix: str = "") -> Iterator[Section]:
    for group in p._action_groups:  # argparse has no public list of its groups
        entries = []
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            if set(action.option_strings) & HIDDEN:
                continue
            entries.append(_entry(prog, action))
        if entries:
            title = group.title or "options"
            if title == "positional arguments":
                title = "arguments"
            yield Section(f"{prefix}{title}", tuple(entries))


def sections(prog: str) -> list[Section]:
    """Every option and argument of a command, in --help's groups; a command with
    subcommands has one section per subcommand (``status: options``)."""
    p = parser(prog)
    out = list(_sections_of(prog, p))
    for action in p._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        per_sub = {
            name: [e for s in _sections_of(prog, sub) for e in s.entries]
            for name, sub in action.choices.items()
        }
        # Options every subcommand takes (a shared parent parser) are listed once.
        common = [e for e in next(iter(per_sub.values())) if all(e in es for es in per_sub.values())]
        if common and len(per_sub) > 1:
            out.append(Section("options of every subcommand", tuple(common)))
        for name, entries in per_sub.items():
            own = tuple(e for e in entries if e not in common)
            if own:
                out.append(Section(f"{name}", own))
    return out


def option_strings(prog: str) -> set[str]:
    """Every option string the command's parser accepts, hidden ones too (for tests)."""
    p = parser(prog)
    found = {o for a in p._actions for o in a.option_strings}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= {o for a in sub._actions for o in a.option_strings}
    return found


def subcommands(prog: str) -> dict[str, str]:
    """Subcommand -> its one-line help (empty for a command without subcommands)."""
    out: dict[str, str] = {}
    for action in parser(prog)._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[choice.dest] = choice.help or ""
    return out


# --- markdown -----------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _option_cell(entry: Entry) -> str:
    if not entry.flags:
        return f"`{_cell(entry.takes)}`"
    takes = f" {entry.takes}" if entry.takes else ""
    first, *rest = entry.shown_flags
    cells = [f"`{_cell(first + takes)}`", *(f"`{f}`" for f in rest)]
    return ", ".join(cells)


def _setting_cell(entry: Entry) -> str:
    from slurm_ft.config import env_name

    if entry.setting is None:
        return ""
    return f"`{entry.setting}` / `{env_name(entry.setting)}`"


def synopsis_block(prog: str) -> str:
    indent = " " * (len(prog) + 1)
    lines = [
        (indent + line.strip()) if line.startswith(" ") else f"{prog} {line}"
        for line in command(prog).synopsis
    ]
    return "```\n" + "\n".join(lines) + "\n```\n"


def options_block(prog: str) -> str:
    """The reference page's option tables (markdown): one per --help group (slurm-ft-launch's
    is :func:`slurm_ft.cli.launchdocs.readme_rows`, between markers of its own)."""
    parts = []
    subs = subcommands(prog)
    if subs:
        parts.append("| subcommand | what it does |\n|---|---|")
        parts.extend(f"| `{name}` | {_cell(text)} |" for name, text in subs.items())
        parts.append("")
    for section in sections(prog):
        parts.append(f"**{section.title}**\n")
        parts.append("| option | setting / environment | meaning |\n|---|---|---|")
        for entry in section.entries:
            parts.append(f"| {_option_cell(entry)} | {_setting_cell(entry)} | {_cell(entry.meaning)} |")
        parts.append("")
    return "\n".join(parts)


def exit_codes_block(prog: str) -> str:
    rows = ["| code | meaning |", "|---|---|"]
    rows.extend(f"| {code} | {_cell(text)} |" for code, text in command(prog).exit_codes)
    return "\n".join(rows) + "\n"


def marker(prog: str, part: str) -> tuple[str, str]:
    """The start and end markers of a generated block of a reference page."""
    tag = f"{part.upper()}:{prog}"
    return f"<!-- {tag}:START -->", f"<!-- {tag}:END -->"


BLOCKS = {"synopsis": synopsis_block, "options": options_block, "exit-codes": exit_codes_block}


def render_page(text: str, prog: str) -> str:
    """A reference page with each of its generated blocks rendered afresh; a page must hold
    every block (a missing marker is an error, so a page cannot silently lose its table)."""
    for part, render in BLOCKS.items():
        if part == "options" and prog == "slurm-ft-launch":
            continue  # launchdocs' own markers: the table predates these pages
        start, end = marker(prog, part)
        text = replace_between(text, start, end, render(prog))
    return text


def replace_between(text: str, start: str, end: str, block: str) -> str:
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i or text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"need exactly one {start} followed by one {end}")
    return text[: i + len(start)] + "\n" + block + text[j:]
