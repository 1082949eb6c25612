"""The test suite's own rules, read from its source: a test that cannot fail checks nothing.

A non-strict ``xfail`` passes as XPASS and "passes" as XFAIL too, and an ``xfail`` whose
reason names no issue is a failure nobody is chasing (issue 47: two Slurm tests sat like
that, one of them the only end-to-end proof of the README's sbatch example). So every
``xfail`` in ``tests/`` must be a mark with ``strict=True`` and a ``reason=`` that links an
issue (``#N``, ``issue N`` or a URL); the imperative ``pytest.xfail()`` and a bare mark
have neither and are refused. ``xfail_strict`` in ``pyproject.toml`` is the second line of
defence for marks built where this reading cannot see them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
LINKED = re.compile(r"#\d+|\bissue \d+|https?://\S+", re.I)


def _is_xfail(node: ast.expr) -> bool:
    """``xfail`` as pytest's mark or function, however it was reached (``pytest.mark.xfail``,
    ``mark.xfail``, ``pytest.xfail``, an imported ``xfail``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "xfail"
    return isinstance(node, ast.Name) and node.id == "xfail"


def _is_imperative(node: ast.expr) -> bool:
    """``pytest.xfail(...)`` (not ``pytest.mark.xfail``): it ends the test as XFAIL at once."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pytest"


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _reason_text(node: ast.expr | None) -> str | None:
    """The reason's text when the source spells it out (a literal, a concatenation, an
    f-string's literal parts); None when it is computed elsewhere."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _reason_text(node.left), _reason_text(node.right)
        return None if left is None or right is None else left + right
    return None


def xfail_problems(source: str, name: str = "<source>") -> list[str]:
    """One line per ``xfail`` in ``source`` that breaks the rule (see the module docstring)."""
    problems: list[str] = []
    called: set[int] = set()
    nodes = list(ast.walk(ast.parse(source)))
    for node in nodes:
        if isinstance(node, ast.Call) and _is_xfail(node.func):
            called.add(id(node.func))
            where = f"{name}:{node.lineno}"
            if _is_imperative(node.func):
                problems.append(f"{where}: pytest.xfail() cannot be strict; use a strict mark")
                continue
            strict = _keyword(node, "strict")
            if not (isinstance(strict, ast.Constant) and strict.value is True):
                problems.append(f"{where}: xfail without strict=True")
            reason = _reason_text(_keyword(node, "reason"))
            if reason is None or not LINKED.search(reason):
                problems.append(f"{where}: xfail without a reason= that links an issue (#N, issue N, URL)")
    for node in nodes:
        if isinstance(node, ast.Attribute | ast.Name) and _is_xfail(node) and id(node) not in called:
            problems.append(f"{name}:{node.lineno}: a bare xfail mark (no strict=True, no reason)")
    return problems


def test_every_xfail_in_the_suite_is_strict_and_links_its_issue() -> None:
    here = Path(__file__).resolve()
    problems = [
        p
        for path in sorted(TESTS.rglob("*.py"))
        if path != here
        for p in xfail_problems(path.read_text(), str(path.relative_to(TESTS.parent)))
    ]
    assert problems == []


def test_pytest_treats_an_unexpected_pass_as_a_failure(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("xfail_strict") is True


def test_the_rule_finds_each_kind_of_unchecked_xfail() -> None:
    source = """
import pytest
from pytest import mark

@pytest.mark.xfail(strict=False, reason="flaky, see #47")
def test_not_strict(): ...

@pytest.mark.xfail(strict=True, reason="timing-dependent; under investigation")
def test_no_link(): ...

@pytest.mark.xfail
def test_bare(): ...

@mark.xfail(reason="issue 47")
def test_strict_left_out(): ...

def test_imperative():
    pytest.xfail("later")

@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.xfail(strict=True))])
def test_param(x): ...

@pytest.mark.xfail(strict=True, reason="needs " + "issue 12 " + "fixed")
def test_fine(): ...

@pytest.mark.xfail(strict=True, reason=f"see https://example.org/issues/{3}")
def test_fine_too(): ...
"""
    found = xfail_problems(source, "t.py")
    assert found == [
        "t.py:5: xfail without strict=True",
        "t.py:8: xfail without a reason= that links an issue (#N, issue N, URL)",
        "t.py:14: xfail without strict=True",
        "t.py:18: pytest.xfail() cannot be strict; use a strict mark",
        "t.py:20: xfail without a reason= that links an issue (#N, issue N, URL)",
        "t.py:11: a bare xfail mark (no strict=True, no reason)",
    ]
