"""The docs site builds with ``mkdocs build --strict`` (every warning an error: a broken
link or anchor, a page left out of the navigation, a missing snippet), and the built HTML
has no broken internal link or anchor and shows every option of every command on its
reference page."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from slurm_ft.cli import refdocs
from tests.support import docs


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name"):
            if values.get(key) and (key == "id" or tag == "a"):
                self.ids.add(str(values[key]))
        target = values.get("href") if tag in ("a", "link") else values.get("src") if tag == "img" else None
        if target:
            self.links.append(target)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the docs tools are not installed ({exc}); scripts/test installs .[test]")
        pytest.skip(f"mkdocs with the material theme is not installed: pip install '.[docs]' ({exc})")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=docs.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-5000:]
    return out


def test_every_page_is_built(site: Path) -> None:
    for name in docs.pages():
        assert (site / name).with_suffix(".html").is_file(), name
    assert (site / "search" / "search_index.json").is_file()


def test_no_broken_internal_link_or_anchor(site: Path) -> None:
    parsed = {p.resolve(): _parse(p) for p in site.rglob("*.html")}
    broken = []
    for path, page in parsed.items():
        if path.name == "404.html":
            continue  # served at any depth, so its links are absolute from the site's root
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//") or link.startswith("mailto:"):
                continue  # outside the site: not ours to check
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(site)}: {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize("prog", [c.prog for c in refdocs.COMMANDS])
def test_every_option_is_on_the_built_reference_page(site: Path, prog: str) -> None:
    text = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / f"{prog}.html").read_text()))
    if prog == "slurm-ft-launch":
        text += html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "compat.html").read_text()))
    missing = [
        o
        for o in sorted(refdocs.option_strings(prog) - {"-h", "--help", "--version"})
        if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)
    ]
    assert missing == [], missing


def test_the_readme_examples_are_included_not_copied(site: Path) -> None:
    """The quick start and the sbatch example are the README's text, included at build time."""
    first = (site / "getting-started" / "first-sbatch.html").read_text()
    assert "#SBATCH --signal=B:USR1@120" in first and "--8&lt;--" not in first
    quick = (site / "getting-started" / "quick-start.html").read_text()
    assert "scripts/demo" in quick and "outcome: finished (exit 0)" in quick
    schema = (site / "reference" / "report-json.html").read_text()
    assert "report_version" in schema and "--8&lt;--" not in schema


def test_a_pipe_in_a_table_cell_reads_as_a_pipe(site: Path) -> None:
    """The source keeps GitHub's ``\\|`` inside code in tables; the site shows ``|``."""
    page = (site / "reference" / "slurm-ft-launch.html").read_text()
    assert "<code>--nproc-per-node N|auto|gpu|cpu</code>" in page
