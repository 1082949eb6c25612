"""MkDocs hooks of the docs site (mkdocs.yml, ``hooks:``).

Table cells keep GitHub's spelling of a pipe inside code (``N\\|auto``: GitHub needs the
backslash even there, so the pages read right in the repository too); Python-Markdown
already keeps a pipe inside a code span in its cell and would show the backslash, so it
is taken out of code spans in table rows before the page is converted.
"""

from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"`[^`\n]*`")


def on_page_markdown(markdown: str, **_: Any) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|") and "\\|" in line:
            lines[i] = _CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)
