"""AutoExperiment's ``{VAR}`` fixed point and ``expr()`` evaluation, with cycle and unresolved-name errors.

Also the parsing of ``str.format`` replacement fields it rests on (referenced names, unsafe fields),
which template rendering shares.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Container, Iterable
from functools import lru_cache
from string import Formatter
from typing import Any, cast

from autoexp.config import safe_expr
from autoexp.config.yamlio import Scalar

MAX_VALUE_CHARS = 1_000_000  # a value that keeps growing (`A: "{{A}}x"`) is stopped here
MAX_FORMAT_WIDTH = 10_000  # `{X:>999999999}` would allocate a gigabyte
_PARSE = Formatter().parse  # the parser str.format itself uses
_IDENT = re.compile(r"[A-Za-z_]\w*")
_ARG_END = re.compile(r"[.\[]")
_DIGITS = re.compile(r"\d+")


# -- replacement fields ---------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def field_names(text: str) -> tuple[str, ...]:
    """The full field names of ``text`` (``LR`` for ``{LR:.0e}``, ``A.b`` for ``{A.b}``), in order.

    Text that str.format cannot parse (a lone ``}``) has none: str.format raises on it, and
    AutoExperiment then leaves the value as it is.
    """
    if "{" not in text:
        return ()
    try:
        return tuple(name for _, name, _, _ in _PARSE(text) if name is not None)
    except ValueError:
        return ()


def field_arg(field: str) -> str | None:
    """The key a field looks up (``LR``, ``A`` for ``A[0].x``, ``my-key``); None for ``{}`` and ``{0}``.

    str.format looks up whatever precedes the first ``.`` or ``[``, so ``{my-key}`` finds a variable
    named ``my-key``; a digit-only field is positional and never finds one.
    """
    arg = _ARG_END.split(field, maxsplit=1)[0]
    return arg if arg and not arg.isdigit() else None


def head_name(field: str, defined: Container[str] = ()) -> str | None:
    """The variable a field refers to when it is a ``{NAME}``: an identifier or a defined key; else None.

    None means the field is not a ``{NAME}``: ``{}``, ``{0}``, a brace range ``{0000..0139}`` or awk's
    ``{print $1}``. str.format fails on those, and AutoExperiment leaves the text as it is.
    """
    arg = field_arg(field)
    if arg is None:
        return None
    return arg if _IDENT.fullmatch(arg) or arg in defined else None


@lru_cache(maxsize=65536)
def referenced_names(text: str) -> tuple[str, ...]:
    """Keys ``text``'s replacement fields look up (nested format specs included): its dependencies."""
    names: list[str] = []
    for field in field_names(text):
        head = field_arg(field)
        if head is not None:
            names.append(head)
    for spec in format_specs(text):
        names.extend(referenced_names(spec))
    return tuple(names)


@lru_cache(maxsize=65536)
def format_specs(text: str) -> tuple[str, ...]:
    """The format specs of ``text``'s fields (``.0e`` for ``{LR:.0e}``)."""
    if "{" not in text:
        return ()
    try:
        return tuple(spec for _, name, spec, _ in _PARSE(text) if name is not None and spec)
    except ValueError:
        return ()


@lru_cache(maxsize=65536)
def unsafe_field(text: str) -> str | None:
    """Why ``text`` must not be given to str.format (private attribute access, huge width), or None."""
    if "{" not in text:
        return None
    for field in field_names(text):
        for part in re.split(r"[.\[\]]", field)[1:]:
            if part.startswith("_"):
                return f"{{{field}}} accesses a private attribute; only plain {{NAME}} fields are allowed"
    for spec in format_specs(text):
        if "{" in spec:
            return f"format spec '{spec}' contains a nested field, which is not allowed"
        for digits in _DIGITS.findall(spec):
            if len(digits) > 6 or int(digits) > MAX_FORMAT_WIDTH:
                return f"format spec '{spec}' asks for a width over {MAX_FORMAT_WIDTH}"
    return None


# -- the fixed point ----------------------------------------------------------------------------------


class SubstitutionError(Exception):
    """A variable could not be resolved; ``var`` names it."""

    def __init__(self, var: str, message: str) -> None:
        self.var = var
        self.message = message
        super().__init__(message)


def is_expr(value: object) -> bool:
    """AutoExperiment's test: the whole string starts with ``expr(`` and ends with ``)``."""
    return type(value) is str and value.startswith("expr(") and value.endswith(")")


# expr() results depend only on the expression text, and the same texts recur across jobs.
_EXPR_CACHE: dict[str, Scalar | safe_expr.ExprError] = {}


def eval_expr(text: str) -> Scalar:
    """Evaluate an ``expr(...)`` string (cached); raise ExprError."""
    cached = _EXPR_CACHE.get(text)
    if cached is None:
        try:
            cached = safe_expr.evaluate(text[5:-1])
        except safe_expr.ExprError as exc:
            cached = exc
        if len(_EXPR_CACHE) > 200_000:
            _EXPR_CACHE.clear()
        _EXPR_CACHE[text] = cached
    if isinstance(cached, safe_expr.ExprError):
        raise cached
    return cached


def _may_change(value: Scalar) -> bool:
    return type(value) is str and ("{" in value or "}" in value or is_expr(value))


_CYCLE_CACHE: dict[tuple[tuple[str, str], ...], list[str] | None] = {}


def find_cycle(params: dict[str, Scalar]) -> list[str] | None:
    """A reference cycle among the variables (``A -> B -> A``), or None."""
    # Only the strings holding fields matter, and jobs of one grid share most of them.
    items = tuple((k, v) for k, v in params.items() if type(v) is str and "{" in v)
    if items in _CYCLE_CACHE:
        return _CYCLE_CACHE[items]
    if len(_CYCLE_CACHE) > 10_000:
        _CYCLE_CACHE.clear()
    found = _find_cycle(items)
    _CYCLE_CACHE[items] = found
    return found


def _find_cycle(items: tuple[tuple[str, str], ...]) -> list[str] | None:
    graph: dict[str, tuple[str, ...]] = {}
    for key, value in items:
        refs = referenced_names(value)
        if refs:
            graph[key] = refs
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for key in graph:
        if key not in state:
            found = visit(key)
            if found:
                return found
    return None


def resolve(params: dict[str, Scalar]) -> dict[str, Scalar]:
    """Resolve ``params`` in place exactly as AutoExperiment's ``generate_job_defs`` loop does.

    Each pass formats every string with the previous pass's non-expr values (``str.format``; a
    failure leaves the value as it was) and evaluates any value that is now a whole ``expr(...)``
    (a failure leaves it for the next pass). Passes repeat until nothing changes. Unlike
    AutoExperiment, cycles, unsafe fields and values that never settle raise SubstitutionError.
    """
    cycle = find_cycle(params)
    if cycle:
        raise SubstitutionError(cycle[0], "reference cycle " + " -> ".join(cycle))
    # Only strings with braces can change under str.format; only exprs can change by evaluation.
    pending = [k for k, v in params.items() if type(v) is str and ("{" in v or "}" in v or v[:5] == "expr(")]
    original = params.copy()
    max_passes = len(pending) + 10  # a chain of references is at most every pending value long
    changed: set[str] | None = None  # None: the first pass looks at everything
    for _ in range(max_passes):
        old = params.copy()
        evaled = old.copy()
        for key in pending:
            text = cast(str, old[key])
            if text.startswith("expr(") and text.endswith(")"):
                del evaled[key]
        now_changed: set[str] = set()
        for key in pending:
            value = cast(str, old[key])  # pending holds only strings
            # A value whose text and referents did not change last pass gives the same result again.
            if changed is not None and key not in changed and changed.isdisjoint(referenced_names(value)):
                continue
            if "{" in value or "}" in value:
                why = unsafe_field(value)
                if why:
                    raise SubstitutionError(key, why)
                try:
                    value = value.format_map(evaled)
                except Exception:  # noqa: S110 -- AutoExperiment semantics: retried next pass
                    pass
                else:
                    if len(value) > MAX_VALUE_CHARS:
                        raise SubstitutionError(key, f"value grows past {MAX_VALUE_CHARS} characters")
                    params[key] = value
            if value.startswith("expr(") and value.endswith(")"):
                # On failure AutoExperiment keeps the expr and retries it on the next pass.
                with contextlib.suppress(safe_expr.ExprError):
                    params[key] = eval_expr(value)
            if params[key] != old[key]:
                now_changed.add(key)
        if not now_changed:  # AutoExperiment's `old_params == params`
            _check_resolved(params, original, pending)
            return params
        changed = now_changed
        pending = [k for k in pending if _may_change(params[k])]
    unsettled = [k for k in pending if _may_change(params[k])]
    var = unsettled[0] if unsettled else next(iter(params))
    raise SubstitutionError(
        var,
        f"substitution did not settle after {max_passes} passes "
        f"(still changing: {', '.join(unsettled[:5])}); "
        "a self-reference through doubled braces?",
    )


def _check_resolved(params: dict[str, Scalar], original: dict[str, Scalar], pending: list[str]) -> None:
    """Raise for the first variable that did not resolve and does not merely wait on another one.

    Only ``pending`` values (strings that held braces or an expr) can still hold either.
    """
    broken = [k for k in pending if _leftover_value(params[k], params)]
    if not broken:
        return
    evaled = {k: v for k, v in params.items() if not is_expr(v)}
    broken_set = set(broken)
    # A variable whose written value refers to another broken one only inherits the problem.
    roots = [
        k for k in broken if not any(n in broken_set and n != k for n in referenced_names(str(original[k])))
    ]
    key = (roots or broken)[0]
    value = str(params[key])
    problem = unresolved_problem(value, evaled, params)
    if problem:
        raise SubstitutionError(key, problem)
    try:
        eval_expr(value)
    except safe_expr.ExprError as exc:
        raise SubstitutionError(key, f"{value} refused: {exc}") from None
    raise SubstitutionError(key, f"{value} did not resolve")  # pragma: no cover (always one of the above)


def _leftover_value(value: Scalar, params: dict[str, Scalar]) -> bool:
    if type(value) is not str or not ("{" in value or value.startswith("expr(")):
        return False
    return is_expr(value) or any(head_name(f, params) is not None for f in field_names(value))


def unresolved_problem(text: str, values: dict[str, Any], defined: dict[str, Any]) -> str | None:
    """Why ``text`` still holds a ``{NAME}`` field: an undefined name, or a format that failed."""
    for field in field_names(text):
        head = head_name(field, defined)
        if head is None:
            continue  # `{}`, `{0}`, `{0000..0139}`: AutoExperiment leaves these as literal text
        if head not in defined:
            return f"unresolved {{{field}}}" + close_matches(head, defined)
        if is_expr(defined[head]):
            return f"{{{field}}} refers to {head}, whose expr() could not be evaluated"
        try:
            text.format_map(values)
        except Exception as exc:
            return f"{{{field}}} cannot be formatted: {type(exc).__name__}: {exc}"
        return f"{{{field}}} is left after substitution (literal braces? values cannot keep {{NAME}} text)"
    return None


def close_matches(name: str, names: Iterable[Any]) -> str:
    """'; did you mean X, Y?' for names close to ``name``, or ''."""
    matches = difflib.get_close_matches(name, [n for n in names if isinstance(n, str)], n=3, cutoff=0.6)
    return f"; did you mean {', '.join(matches)}?" if matches else ""
