"""Man pages (roff, the ``man(7)`` macros) of the commands, from their parsers.

``man slurm-ft-launch`` is what a Slurm user types first. The page is made from the same
source as ``--help`` and the docs' reference pages (:mod:`slurm_ft.cli.refdocs`): the
parser's options in its groups, the fuller meanings, the synopsis and the exit codes, so a
new option reaches all three. No dependency: the few markdown forms the meanings use
(code, bold, emphasis, links) become roff fonts here. The pages are rendered into ``man/``
by ``scripts/lib/render_docs.py`` and installed with the package (``share/man/man1``).
"""

from __future__ import annotations

import re

from slurm_ft.cli import refdocs

DOCS_HINT = (
    "The full documentation (guides, the settings table, state-dir records, the report's "
    "JSON schema) is in the docs/ directory of the source tree; build it with "
    "`mkdocs build`."
)

_INLINE = re.compile(
    r"`([^`]*)`|\*\*(.+?)\*\*|(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])|\[([^\]]+)\]\([^)]*\)"
)


def escape(text: str) -> str:
    """Plain text safe in roff: backslashes escaped, characters beyond ASCII as groff's
    Unicode escapes (a page must not depend on the reader's locale or on preconv)."""
    text = text.replace("\\", "\\e")
    return "".join(ch if ord(ch) < 128 else f"\\[u{ord(ch):04X}]" for ch in text)


def _code(text: str) -> str:
    # Hyphens in code are real minus signs (what a reader types), as man-pages(7) asks.
    return escape(text).replace("-", "\\-")


def inline(markdown: str) -> str:
    """One paragraph of the docs' markdown as roff text (fonts for code, bold and emphasis;
    a link keeps its words)."""
    markdown = markdown.replace("\\|", "|")
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(markdown):
        out.append(escape(markdown[pos : m.start()]))
        code, bold, em, link = m.groups()
        if code is not None:
            out.append(f"\\fB{_code(code)}\\fR")
        elif bold is not None:
            out.append(f"\\fB{inline(bold)}\\fR")
        elif em is not None:
            out.append(f"\\fI{inline(em)}\\fR")
        else:
            out.append(inline(link))
        pos = m.end()
    out.append(escape(markdown[pos:]))
    return "".join(out)


def _lines(text: str) -> list[str]:
    """roff source lines of a paragraph: a line that would start with a request character
    is protected with a zero-width escape."""
    return [("\\&" + line) if line[:1] in (".", "'") else line for line in text.splitlines() if line.strip()]


def _option_heading(entry: refdocs.Entry) -> str:
    if not entry.flags:
        return f"\\fI{_code(entry.takes)}\\fR"
    takes = f" \\fI{_code(entry.takes)}\\fR" if entry.takes else ""
    return ", ".join(f"\\fB{_code(f)}\\fR{takes}" for f in entry.shown_flags)


def render(prog: str) -> str:
    """The whole man page of one command."""
    from slurm_ft import __version__
    from slurm_ft.config import env_name

    cmd = refdocs.command(prog)
    parser = refdocs.parser(prog)
    out = [
        f'.\\" Generated from the parser by scripts/lib/render_docs.py ({__name__}); do not edit.',
        f'.TH {prog.upper()} 1 "" "slurm-ft {__version__}" "slurm-ft manual"',
        ".ad l",
        ".SH NAME",
        f"{prog} \\- {escape(cmd.summary)}",
        ".SH SYNOPSIS",
        ".nf",
    ]
    for line in cmd.synopsis:
        out.extend(_lines(f"\\fB{_code(prog)}\\fR {escape(line.strip())}"))
    out += [".fi", ".SH DESCRIPTION"]
    out.extend(_lines(inline(parser.description or cmd.summary)))
    if parser.epilog:
        out += [".PP", *_lines(inline(parser.epilog))]
    subs = refdocs.subcommands(prog)
    if subs:
        out.append(".SH COMMANDS")
        for name, text in subs.items():
            out += [".TP", f"\\fB{name}\\fR", *_lines(inline(text))]
    out.append(".SH OPTIONS")
    out += [".TP", "\\fB\\-h\\fR, \\fB\\-\\-help\\fR", "show the help and exit"]
    out += [".TP", "\\fB\\-\\-version\\fR", "show the version and exit"]
    for section in refdocs.sections(prog):
        out.append(f'.SS "{escape(section.title)}"')
        for entry in section.entries:
            out += [".TP", _option_heading(entry), *_lines(inline(entry.meaning))]
            facts = []
            if entry.default:
                facts.append(f"Default {inline(entry.default)}.")
            if entry.setting:
                env = _code(env_name(entry.setting))
                facts.append(f"Setting \\fB{_code(entry.setting)}\\fR, environment \\fB{env}\\fR.")
            if facts:
                out += [".br", " ".join(facts)]
    out.append(".SH EXIT STATUS")
    for code, text in cmd.exit_codes:
        out += [".TP", f"\\fB{escape(code)}\\fR", *_lines(inline(text))]
    out += [
        ".SH ENVIRONMENT",
        "Every setting is also a YAML key (under \\fBslurm_ft:\\fR in the file of \\fB\\-\\-config\\fR "
        "or \\fBSLURM_FT_CONFIG\\fR) and a \\fBSLURM_FT_*\\fR environment variable. Precedence: "
        "defaults < YAML file < environment < command line. The \\fBSLURM_*\\fR variables of "
        "\\fBsbatch\\fR and \\fBsrun\\fR give the job; without them the command runs standalone on "
        "one node.",
        ".SH SEE ALSO",
        ", ".join(f"\\fB{_code(c.prog)}\\fR(1)" for c in refdocs.COMMANDS if c.prog != prog)
        + ", \\fBsbatch\\fR(1), \\fBsrun\\fR(1)",
        ".PP",
        *_lines(inline(DOCS_HINT)),
    ]
    return "\n".join(out) + "\n"
