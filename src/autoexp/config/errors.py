"""The one exception type of the config engine, formatted as ``FILE:LINE: key.path: message``."""

from __future__ import annotations


class ConfigError(Exception):
    """A problem in a config, an override, a filter or a template, located by file and line.

    Parameters:
        file: the file (or pseudo-file such as ``<-f LR=1>``) the problem is in.
        line: 1-based line number.
        key: dotted key path (``PHASE.COOLDOWN.CD_SCALE.100M.TOTAL_TOKENS_THIS_PHASE``) or "".
        message: what is wrong, and the fix where one is obvious; a single line.
    """

    def __init__(self, file: str, line: int, key: str, message: str) -> None:
        self.file = file
        self.line = line
        self.key = key
        self.message = " ".join(message.split("\n"))
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"
