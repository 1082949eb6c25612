"""Bad input on a command line: one exception and a parser that raises it.

argparse prints its own usage block and exits 2 on an error; every command here instead
reports one line (``<prog>: error: <what>``) and exits with ``ExitCode.BAD_INPUT``, so the
parser raises and each front end prints.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(Exception):
    pass


class UsageParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)
