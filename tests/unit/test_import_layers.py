"""The import rules of DESIGN.md, read from the source: no import circles, and no arrow that
climbs (config never imports launch; report and compat never import launch; nothing below
cli/ imports cli/). Every import counts, lazy ones and TYPE_CHECKING ones too, and so does
the package ``__init__`` that importing ``a.b.c`` runs first: a lazy import still ties the
modules together, and a circle through an ``__init__`` is one Python will walk into."""

from __future__ import annotations

import ast
from pathlib import Path

import slurm_ft

PACKAGE = Path(slurm_ft.__file__).resolve().parent

# The lowest room: the job contract, the settings and the formats every command shares.
BOTTOM = {
    "slurm",
    "hostlist",
    "config",
    "settingsyntax",
    "records",
    "readinglines",
    "exitcodes",
    "statedir",
    "atomicfile",
    "privatefiles",
    "childprobe",
    "logline",
    "parentdeath",
    "leftovers",
}
# What each room may not import (a room is the first name below slurm_ft).
FORBIDDEN = {
    **{name: {"launch", "cli", "report", "compat", "progress", "health", "topology"} for name in BOTTOM},
    "report": {"launch", "cli"},
    "compat": {"launch", "cli"},
    "progress": {"launch", "cli"},
    "health": {"launch", "cli"},
    "topology": {"launch", "cli"},
    "launch": {"cli"},
    "logs": {"launch", "cli"},
    # the snapshot mechanism: the launcher and the worker API use it, never the reverse
    "integrations": {"launch", "cli", "report", "compat", "progress", "health", "topology", "logs", "drill"},
    "snapshot": {
        "launch",
        "cli",
        "report",
        "compat",
        "progress",
        "health",
        "topology",
        "logs",
        "drill",
        "worker",
    },
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("slurm_ft", *path.relative_to(PACKAGE).with_suffix("").parts))
        out[name.removesuffix(".__init__")] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every module each module makes Python run: the imported one and its packages."""
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                for k in range(2, len(parts) + 1):
                    dep = ".".join(parts[:k])
                    if dep in mods and dep != name and not name.startswith(dep + "."):
                        found.add(dep)
        edges[name] = found
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _room(name: str) -> str:
    return name.split(".")[1] if "." in name else ""


def test_no_import_circles() -> None:
    assert _circles(_edges(_modules())) == []


def test_the_circle_finder_finds_one_through_a_package_init() -> None:
    edges = {"p.config": {"p.prog.src", "p.prog"}, "p.prog": {"p.prog.policy"}, "p.prog.policy": {"p.config"}}
    edges["p.prog.src"] = set()
    assert _circles(edges) == [["p.config", "p.prog", "p.prog.policy"]]


def test_no_arrow_climbs() -> None:
    climbing = sorted(
        f"{name} -> {dep}"
        for name, deps in _edges(_modules()).items()
        for dep in deps
        if _room(dep) in FORBIDDEN.get(_room(name), set())
    )
    assert climbing == []


# The launcher's roles: what runs a cycle. Hang detection (launch/hang/) gives them verdicts
# and readings and never calls back up into them.
ROLE_NAMES = (
    "cycle.agent",
    "roles.member",
    "roles.coordinator",
    "succession.storeloss",
    "succession.handover",
    "farewell",
    "wayout",
    "companions",
)
ROLES = {f"slurm_ft.launch.{name}" for name in ROLE_NAMES}


def test_hang_detection_imports_no_role() -> None:
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in _edges(_modules()).items()
        if name == "slurm_ft.launch.hang" or name.startswith("slurm_ft.launch.hang.")
        for dep in deps
        if dep in ROLES
    )
    assert upward == []
