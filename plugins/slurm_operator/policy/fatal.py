"""Fatal log rules: lines that mean a job must not run again (the same input would end the same way).

A rule has a name (what the user is told the attempt was, e.g. ``DIVERGED``) and patterns, each a
regex alone (one matching line is enough), ``{"pattern": regex, "repeats": m}``: m consecutive
matching lines, or ``{"pattern": regex, "above_median": k, "repeats": m, "window": w}``: m
consecutive lines whose number (the regex's one group) is above k x the median of the w values
before them (``MedianWindow``: a quantity that leaves its level, a spike).
"Consecutive" counts the lines that report progress (``progress_pattern``, the job's log-interval
lines) when the caller gives one: a warning between two such lines neither counts nor breaks the
run, a progress line that does not match breaks it, and only progress lines count toward m > 1.
Without a progress pattern every line counts, and every line that does not match breaks the run.

The same scan reads the running job's new log lines as the wait relays them (``FatalScan``,
one per wait: the count goes on across reads) and an ended job's log tail (``first_match``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The JSON form an operator and a trigger take: name -> [regex | {"pattern": regex, "repeats": m}
# | {"pattern": regex, "above_median": k, "repeats": m, "window": w}].
FatalSpec = Mapping[str, Sequence[str | Mapping[str, Any]]]
# Values in the running median of an ``above_median`` pattern without a ``window``.
DEFAULT_WINDOW = 20
_KEYS = frozenset({"pattern", "repeats", "above_median", "window"})
_SHAPE = (
    '{"pattern": regex, "repeats": m} or {"pattern": regex, "above_median": k, "repeats": m, "window": w}'
)


class FatalSpecError(ValueError):
    """A fatal pattern that is not a regex, or a spec of the wrong shape; the message names it."""


@dataclass(frozen=True)
class FatalPattern:
    """A regex searched in each line; ``repeats`` consecutive matching lines make it match.

    With ``above_median`` (k > 1) a line matches only when the number the regex's one group captures
    is above k x the median of the last ``window`` values before it (``MedianWindow``).
    """

    regex: str
    repeats: int = 1
    above_median: float | None = None
    window: int = DEFAULT_WINDOW

    @classmethod
    def parse(cls, spec: Any, where: str) -> FatalPattern:
        """A spec entry (a regex, or a mapping of the two other shapes); FatalSpecError names ``where``."""
        if isinstance(spec, str):
            return cls(_compiled(spec, where).pattern)
        if not isinstance(spec, Mapping) or not set(spec) <= _KEYS or "pattern" not in spec:
            raise FatalSpecError(f"{where}: expected a regex or {_SHAPE}, got {spec!r}")
        pattern, repeats = spec["pattern"], spec.get("repeats", 1)
        if not isinstance(pattern, str):
            raise FatalSpecError(f"{where}.pattern: expected a regex string, got {pattern!r}")
        if not _is_int(repeats) or repeats < 1:
            raise FatalSpecError(f"{where}.repeats: expected an integer >= 1, got {repeats!r}")
        regex = _compiled(pattern, where)
        if "above_median" not in spec:
            if "window" in spec:
                raise FatalSpecError(f"{where}.window: only with above_median, got {spec['window']!r}")
            return cls(pattern, repeats)
        k, window = spec["above_median"], spec.get("window", DEFAULT_WINDOW)
        if isinstance(k, bool) or not isinstance(k, int | float) or not math.isfinite(k) or k <= 1:
            raise FatalSpecError(f"{where}.above_median: expected a number > 1, got {k!r}")
        if not _is_int(window) or window < 1:
            raise FatalSpecError(f"{where}.window: expected an integer >= 1, got {window!r}")
        if regex.groups != 1:
            raise FatalSpecError(
                f"{where} {pattern!r}: above_median needs one capture group (the number), not {regex.groups}"
            )
        return cls(pattern, repeats, float(k), window)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _compiled(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise FatalSpecError(f"{where} {pattern!r}: {exc}") from None


class MedianWindow:
    """Whether a series of values has left its level: above k x the median of the last w values.

    A value above it, and any value that is not finite (NaN, inf: nothing to compare), is an outlier
    and stays out of the window, so a spike is always judged against the values before it; a value
    at the level joins the window, pushing out its oldest. Nothing finite is judged before the window
    holds w values (the median of one or two values is noise). Meant for positive values.
    """

    def __init__(self, factor: float, size: int) -> None:
        self.factor = factor
        self._values: deque[float] = deque(maxlen=size)

    def outlier(self, value: float) -> bool:
        """Judge ``value`` (NaN and inf are outliers whatever the window); remember it if it is not."""
        if not math.isfinite(value):
            return True
        full = len(self._values) == self._values.maxlen
        if full and value > self.factor * statistics.median(self._values):
            return True
        self._values.append(value)
        return False


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
        self._rules = [(r.name, [(re.compile(p.regex), p) for p in r.parsed]) for r in rules]
        self._progress = re.compile(progress_pattern) if progress_pattern else None
        self._runs: dict[tuple[int, int], int] = {}  # (rule, pattern) -> consecutive matching lines
        self._windows = {  # (rule, pattern) -> the values of an above_median pattern
            (r, p): MedianWindow(pattern.above_median, pattern.window)
            for r, (_, patterns) in enumerate(self._rules)
            for p, (_, pattern) in enumerate(patterns)
            if pattern.above_median is not None
        }

    def feed(self, text: str) -> tuple[str, str] | None:
        """Take the next complete lines; the first rule they complete, with its last line, else None."""
        for line in text.splitlines():
            progress = self._progress is None or self._progress.search(line) is not None
            for r, (name, patterns) in enumerate(self._rules):
                for p, (regex, pattern) in enumerate(patterns):
                    found = regex.search(line)
                    counts = progress or pattern.repeats == 1
                    if found and counts and (r, p) in self._windows:
                        spike = self._outlier(self._windows[r, p], found.group(1))
                        if spike is None:
                            continue  # no number there: the line neither counts nor breaks the run
                        found = found if spike else None
                    if found and counts:
                        self._runs[r, p] = self._runs.get((r, p), 0) + 1
                        if self._runs[r, p] >= pattern.repeats:
                            return name, line.strip()
                    elif progress:
                        self._runs[r, p] = 0
        return None

    @staticmethod
    def _outlier(window: MedianWindow, captured: str | None) -> bool | None:
        """Whether the captured number is a spike; None when it is not a number."""
        try:
            return window.outlier(float(captured or ""))
        except ValueError:
            return None
