"""What a standby preloads with ``--preload auto``: the installed packages a script imports
when it runs, read off its source (and its own modules' sources), never by running it;
then what those packages import on first use.

Loaded by path by ``standby_child.py``, in the workers' interpreter: standard library
only, and never ``from __future__``, like the child.
"""

import ast
import importlib.util
import os
import sys

# What a package imports on first use, which a trainer reaches in its first step: DDP's
# constructor (and torch.compile) import torch._dynamo, some 830 modules (1.3 s of CPU on
# a quiet core here, more with every rank of a node at it), after the process group is
# up. A script that uses any of these names gets the modules preloaded with ``auto``.
FIRST_USE = (
    (
        ("torch.distributed", "torch.nn.parallel", "DistributedDataParallel", "torch.compile"),
        ("torch._dynamo",),
    ),
)
LOCAL_MODULES_MAX = 200  # the script's own modules read for their imports, at most


def script_dir(argv0: str) -> str:
    """``sys.path[0]`` for ``python SCRIPT``: the directory of the script, links resolved."""
    return os.path.dirname(os.path.realpath(argv0))


def _import_names(nodes: list[ast.stmt], package: str | None) -> list[str]:
    """Absolute names of what ``nodes`` import (``from a import b`` gives ``a`` and ``a.b``:
    b may be a submodule)."""
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            base = node.module or ""
        elif package is not None:
            parts = package.split(".")
            kept = parts[: len(parts) - node.level + 1]
            if not kept:
                continue
            base = ".".join([*kept, node.module] if node.module else kept)
        else:
            continue
        if base:
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _top_level_imports(tree: ast.Module, package: str | None) -> list[str]:
    """What a module imports when it runs: the imports of its top-level statements
    (``if __name__ == "__main__":`` blocks included), then those inside the functions
    those statements name (``main`` imports torch in many trainers), not those of
    functions it may never call."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    running = [stmt for stmt in tree.body if not isinstance(stmt, defs)]
    named = {n.id for stmt in running for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    nodes: list[ast.stmt] = [
        n for stmt in running for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))
    ]
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in named:
            nodes.extend(n for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return _import_names(nodes, package)


def _local_file(root: str, name: str) -> str | None:
    """The file of module ``name`` under the script's directory, or None."""
    stem = os.path.join(root, *name.split("."))
    for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _parsed(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as fh:
            return ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _installed(top: str) -> bool:
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "__future__":
        return False
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _uses(tree: ast.Module, names: tuple[str, ...]) -> bool:
    """The module names a dotted attribute or a name in ``names`` anywhere in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                parts.append(value.id)
            dotted = ".".join(reversed(parts))
            if any(dotted == n or dotted.endswith("." + n) or node.attr == n for n in names):
                return True
        elif isinstance(node, ast.Name) and node.id in names:
            return True
    return False


def auto_modules(script: str) -> list[str]:
    """The installed packages the script imports at its top level, directly or through
    its own modules (those are read, never imported): what every worker imports before
    its first step; then what those packages import on first use (:data:`FIRST_USE`).
    The script's own modules are never preloaded, so an edit between two cycles is still
    picked up; nor is the standard library (cheap: nothing to win)."""
    root = script_dir(script)
    first = _parsed(script)
    if first is None:
        return []
    found: list[str] = []
    read: set[str] = set()
    queue: list[tuple[ast.Module, str | None]] = [(first, None)]
    first_use: list[str] = []
    while queue:
        tree, package = queue.pop(0)
        imports = _top_level_imports(tree, package)
        for names, modules in FIRST_USE:
            hit = any(i == n or i.startswith(n + ".") for i in imports for n in names) or _uses(tree, names)
            if hit:
                first_use.extend(m for m in modules if m not in first_use)
        for name in imports:
            top = name.split(".")[0]
            if _local_file(root, top) is None:
                if top not in found and _installed(top):
                    found.append(top)
                continue
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                module = ".".join(parts[:depth])
                path = _local_file(root, module)
                if path is None or path in read or len(read) >= LOCAL_MODULES_MAX:
                    continue
                read.add(path)
                tree_of = _parsed(path)
                if tree_of is not None:
                    is_package = os.path.basename(path) == "__init__.py"
                    queue.append((tree_of, module if is_package else module.rpartition(".")[0] or None))
    return found + [m for m in first_use if m.split(".")[0] in found and m not in found]
