"""The man pages: generated from the parsers (a stale page fails), every option on its
page, valid roff, and installed with the package into share/man/man1."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from slurm_ft.cli import manpage, refdocs
from tests.support import docs

PROGS = [c.prog for c in refdocs.COMMANDS]
MAN = docs.REPO / "man" / "man1"


@pytest.mark.parametrize("prog", PROGS)
def test_the_page_is_what_the_parser_makes(prog: str) -> None:
    assert (MAN / f"{prog}.1").read_text() == manpage.render(prog), "run: python scripts/lib/render_docs.py"


@pytest.mark.parametrize("prog", PROGS)
def test_every_option_is_on_its_page(prog: str) -> None:
    page = (MAN / f"{prog}.1").read_text()
    shown = {f for s in refdocs.sections(prog) for e in s.entries for f in e.shown_flags}
    hidden = {o for o in refdocs.option_strings(prog) if "_" in o and o.replace("_", "-") in shown}
    suppressed = {o for o in refdocs.option_strings(prog) if o not in shown and o not in hidden}
    for option in sorted(shown | {"--help", "--version"}):
        assert f"\\fB{option.replace('-', chr(92) + '-')}\\fR" in page, option
    # torchrun's refused flags (hidden from --help) are in the docs' table, not the man page
    assert suppressed <= refdocs.option_strings(prog)
    assert ".SH EXIT STATUS" in page and ".SH SYNOPSIS" in page


def test_roff_helpers_escape_what_roff_would_misread() -> None:
    assert manpage.inline("`--a-b` and **x** [link](y.md)") == "\\fB\\-\\-a\\-b\\fR and \\fBx\\fR link"
    assert manpage.escape("a\\b ×") == "a\\eb \\[u00D7]"


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("prog", PROGS)
def test_the_page_renders_without_a_warning(prog: str) -> None:
    proc = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(MAN / f"{prog}.1")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_pages_ship_in_the_wheel(tmp_path: Path) -> None:
    """A wheel installs them into <prefix>/share/man/man1, where man looks when MANPATH has
    <venv>/share/man. Built from a copy of the source, without build isolation (no network)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(docs.REPO / name, src / name)
    shutil.copytree(docs.REPO / "slurm_ft", src / "slurm_ft", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(docs.REPO / "man", src / "man")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("slurm_ft-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for prog in PROGS:
        assert any(n.endswith(f".data/data/share/man/man1/{prog}.1") for n in names), (prog, names[-10:])
