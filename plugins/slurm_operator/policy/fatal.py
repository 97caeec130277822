"""Fatal log rules: lines that mean a job must not run again (the same input would end the same way).

A rule has a name (what the user is told the attempt was, e.g. ``DIVERGED``) and patterns, each a
regex alone (one matching line is enough) or ``{"pattern": regex, "repeats": m}``: m consecutive
matching lines. "Consecutive" counts the lines that report progress (``progress_pattern``, the
job's log-interval lines) when the caller gives one: a warning between two such lines neither
counts nor breaks the run, a progress line that does not match breaks it, and only progress lines
count toward m > 1. Without a progress pattern every line counts, and every line that does not
match breaks the run.

The same scan reads the running job's new log lines as the wait relays them (``FatalScan``,
one per wait: the count goes on across reads) and an ended job's log tail (``first_match``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The JSON form an operator and a trigger take: name -> [regex | {"pattern": regex, "repeats": m}].
FatalSpec = Mapping[str, Sequence[str | Mapping[str, Any]]]


class FatalSpecError(ValueError):
    """A fatal pattern that is not a regex, or a spec of the wrong shape; the message names it."""


@dataclass(frozen=True)
class FatalPattern:
    """A regex searched in each line; ``repeats`` consecutive matching lines make it match."""

    regex: str
    repeats: int = 1

    @classmethod
    def parse(cls, spec: Any, where: str) -> FatalPattern:
        """A spec entry (a regex, or ``{"pattern": ..., "repeats": ...}``); FatalSpecError names ``where``."""
        if isinstance(spec, str):
            pattern, repeats = spec, 1
        elif isinstance(spec, Mapping) and set(spec) <= {"pattern", "repeats"} and "pattern" in spec:
            pattern, repeats = spec["pattern"], spec.get("repeats", 1)
        else:
            shape = '{"pattern": regex, "repeats": m}'
            raise FatalSpecError(f"{where}: expected a regex or {shape}, got {spec!r}")
        if not isinstance(pattern, str):
            raise FatalSpecError(f"{where}.pattern: expected a regex string, got {pattern!r}")
        if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
            raise FatalSpecError(f"{where}.repeats: expected an integer >= 1, got {repeats!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FatalSpecError(f"{where} {pattern!r}: {exc}") from None
        return cls(pattern, repeats)


@dataclass(frozen=True)
class FatalRules:
    """One named rule: its patterns, in order (the first that matches names the line); a plain
    string is a pattern of one line."""

    name: str
    patterns: tuple[FatalPattern | str, ...]

    def __post_init__(self) -> None:
        plain = tuple(FatalPattern(p) if isinstance(p, str) else p for p in self.patterns)
        object.__setattr__(self, "patterns", plain)

    @property
    def parsed(self) -> tuple[FatalPattern, ...]:
        """The patterns, each a FatalPattern."""
        return tuple(p for p in self.patterns if isinstance(p, FatalPattern))

    def first_match(self, log_tail: str, progress_pattern: str | None = None) -> str | None:
        """The line of ``log_tail`` with which a pattern first matched (stripped), None when none did."""
        hit = FatalScan((self,), progress_pattern).feed(log_tail)
        return None if hit is None else hit[1]


def parse_rules(spec: FatalSpec | None, where: str = "fatal_patterns") -> tuple[FatalRules, ...]:
    """The rules of a spec (name -> patterns), in its order; FatalSpecError names the bad entry."""
    rules = []
    for name, patterns in (spec or {}).items():
        if isinstance(patterns, str | bytes) or not isinstance(patterns, Sequence):
            raise FatalSpecError(f"{where}[{name!r}]: expected a list of patterns, got {patterns!r}")
        parsed = (FatalPattern.parse(p, f"{where}[{name!r}][{i}]") for i, p in enumerate(patterns))
        rules.append(FatalRules(str(name), tuple(parsed)))
    return tuple(rules)


class FatalScan:
    """Reads a log in pieces and says when a rule matched: ``feed`` returns (rule name, line)."""

    def __init__(self, rules: Sequence[FatalRules], progress_pattern: str | None = None) -> None:
        self._rules = [(r.name, [(re.compile(p.regex), p.repeats) for p in r.parsed]) for r in rules]
        self._progress = re.compile(progress_pattern) if progress_pattern else None
        self._runs: dict[tuple[int, int], int] = {}  # (rule, pattern) -> consecutive matching lines

    def feed(self, text: str) -> tuple[str, str] | None:
        """Take the next complete lines; the first rule they complete, with its last line, else None."""
        for line in text.splitlines():
            progress = self._progress is None or self._progress.search(line) is not None
            for r, (name, patterns) in enumerate(self._rules):
                for p, (regex, repeats) in enumerate(patterns):
                    if regex.search(line) and (progress or repeats == 1):
                        self._runs[r, p] = self._runs.get((r, p), 0) + 1
                        if self._runs[r, p] >= repeats:
                            return name, line.strip()
                    elif progress:
                        self._runs[r, p] = 0
        return None
