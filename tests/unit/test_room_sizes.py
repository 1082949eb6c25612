"""Every room fits in a head: a module of slurm_ft/ is at most 500 lines and a class at most
250 (from its ``class`` line to its last), or it is an exception the module map names with
its reason (docs/design/module-map.md, "Rooms over the size limits"). An exception that fits
again leaves the list, so the list only ever shrinks to what is still too big."""

from __future__ import annotations

import ast
from pathlib import Path

import slurm_ft

PACKAGE = Path(slurm_ft.__file__).resolve().parent
MODULE_MAP = PACKAGE.parent / "docs" / "design" / "module-map.md"
MODULE_LINES = 500
CLASS_LINES = 250

# Each entry's reason is in the module map.
BIG_MODULES: set[str] = set()
BIG_CLASSES: set[str] = set()


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                classes[f"{name}::{node.name}"] = node.end_lineno - node.lineno + 1
    return modules, classes


def test_every_module_fits_or_is_a_named_exception() -> None:
    modules, _ = _sizes()
    too_big = {name: n for name, n in modules.items() if n > MODULE_LINES and name not in BIG_MODULES}
    assert too_big == {}, f"over {MODULE_LINES} lines: cut them along their seams"


def test_every_class_fits_or_is_a_named_exception() -> None:
    _, classes = _sizes()
    too_big = {name: n for name, n in classes.items() if n > CLASS_LINES and name not in BIG_CLASSES}
    assert too_big == {}, f"over {CLASS_LINES} lines: cut them along their seams"


def test_every_exception_is_still_too_big_and_has_its_reason_in_the_module_map() -> None:
    modules, classes = _sizes()
    fits = sorted(
        [name for name in BIG_MODULES if modules.get(name, 0) <= MODULE_LINES]
        + [name for name in BIG_CLASSES if classes.get(name, 0) <= CLASS_LINES]
    )
    assert fits == [], "these fit now (or are gone): take them off the lists here and in the module map"
    text = MODULE_MAP.read_text()
    unexplained = sorted(name for name in BIG_MODULES | BIG_CLASSES if f"`{name}`" not in text)
    assert unexplained == []
