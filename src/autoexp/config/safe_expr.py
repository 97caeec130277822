"""Safe evaluation of AutoExperiment's ``expr(...)``: arithmetic on literals, never ``eval``."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

# Limits that keep a hostile or mistaken expression from exhausting memory or time.
MAX_SOURCE_CHARS = 10_000
MAX_NODES = 2_000
MAX_INT_BITS = 4_096  # about 1,233 decimal digits: far beyond any token count or iteration number
MAX_SEQ_LEN = 10_000  # longest string or list an expression may build

Value = int | float | str | bool


class ExprError(Exception):
    """The expression is not plain arithmetic, or evaluating it failed."""


def _checked_pow(base: Any, exp: Any) -> Any:
    big = isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1
    if big and exp * abs(base).bit_length() > MAX_INT_BITS:
        raise ExprError(f"{base}**{exp} is too large (over {MAX_INT_BITS} bits)")
    return operator.pow(base, exp)


def _checked_mul(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and abs(a).bit_length() + abs(b).bit_length() > MAX_INT_BITS:
        raise ExprError(f"product is too large (over {MAX_INT_BITS} bits)")
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > MAX_SEQ_LEN:
            raise ExprError(f"repetition builds a sequence longer than {MAX_SEQ_LEN}")
    return operator.mul(a, b)


def _checked_lshift(a: Any, b: Any) -> Any:
    if isinstance(b, int) and isinstance(a, int) and abs(a).bit_length() + b > MAX_INT_BITS:
        raise ExprError(f"shift is too large (over {MAX_INT_BITS} bits)")
    return operator.lshift(a, b)


def _checked_mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):
        raise ExprError("%-formatting of strings is not allowed")
    return operator.mod(a, b)


def _checked_add(a: Any, b: Any) -> Any:
    result = operator.add(a, b)
    if isinstance(result, str | list | tuple) and len(result) > MAX_SEQ_LEN:
        raise ExprError(f"concatenation builds a sequence longer than {MAX_SEQ_LEN}")
    return result


_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: _checked_add,
    ast.Sub: operator.sub,
    ast.Mult: _checked_mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: _checked_mod,
    ast.Pow: _checked_pow,
    ast.LShift: _checked_lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}


def _pow_function(*args: Any) -> Any:
    if len(args) != 2:
        raise ExprError("pow() takes exactly 2 arguments here")
    return _checked_pow(args[0], args[1])


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "bool": bool,
    "float": float,
    "int": int,
    "len": len,
    "max": max,
    "min": min,
    "pow": _pow_function,
    "round": round,
    "str": str,
    "sum": sum,
    "ceil": math.ceil,
    "floor": math.floor,
    "trunc": math.trunc,
    "sqrt": math.sqrt,
    "isqrt": math.isqrt,
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
}

_ALLOWED_HINT = (
    "expr() allows numbers, strings, arithmetic, comparisons, and/or/not, `x if c else y` and the "
    "functions " + ", ".join(sorted(FUNCTIONS))
)


def evaluate(source: str) -> Value:
    """Evaluate the inside of ``expr(...)``; raise ExprError naming the offending part."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"invalid syntax: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ExprError(f"cannot parse: {type(exc).__name__}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ExprError(f"expression has more than {MAX_NODES} parts")
    try:
        result = _eval(tree.body)
    except ExprError:
        raise
    except RecursionError:
        raise ExprError("expression nested too deeply") from None
    except (ArithmeticError, ValueError, TypeError, MemoryError) as exc:
        raise ExprError(f"{type(exc).__name__}: {exc}") from None
    if type(result) not in (int, float, str, bool):
        raise ExprError(f"result is a {type(result).__name__}; expr() must produce a number, string or bool")
    return result  # type: ignore[no-any-return]


def _segment(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # unparse never runs anything; any failure just loses the quote
        return type(node).__name__


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        if type(node.value) not in (int, float, str, bool):
            raise ExprError(f"constant {_segment(node)} is not allowed; {_ALLOWED_HINT}")
        return node.value
    if isinstance(node, ast.BinOp):
        binop = _BINOPS.get(type(node.op))
        if binop is None:
            raise ExprError(f"operator in '{_segment(node)}' is not allowed")
        return binop(_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BoolOp):
        value: Any = None
        for operand in node.values:
            value = _eval(operand)
            # Python's and/or return the deciding operand and short-circuit; keep both properties.
            if isinstance(node.op, ast.And) and not value:
                return value
            if isinstance(node.op, ast.Or) and value:
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            compare = _COMPARE.get(type(op))
            if compare is None:
                raise ExprError(f"comparison in '{_segment(node)}' is not allowed")
            right = _eval(comparator)
            if not compare(left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body) if _eval(node.test) else _eval(node.orelse)
    if isinstance(node, ast.Call):
        return _call(node)
    if isinstance(node, ast.Tuple | ast.List):
        if len(node.elts) > MAX_SEQ_LEN:
            raise ExprError("literal list too long")
        items = [_eval(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Name):
        raise ExprError(
            f"name '{node.id}' is not allowed (variables are pasted in as text with {{{node.id}}}; "
            f"quote string values); {_ALLOWED_HINT}"
        )
    if isinstance(node, ast.Attribute):
        raise ExprError(f"attribute access '{_segment(node)}' is not allowed")
    if isinstance(node, ast.Set | ast.Dict):
        raise ExprError(f"'{_segment(node)}' is not allowed (an unresolved {{NAME}} left in the expression?)")
    raise ExprError(f"'{_segment(node)}' ({type(node).__name__}) is not allowed; {_ALLOWED_HINT}")


def _call(node: ast.Call) -> Any:
    if not isinstance(node.func, ast.Name):
        raise ExprError(f"call of '{_segment(node.func)}' is not allowed; {_ALLOWED_HINT}")
    function = FUNCTIONS.get(node.func.id)
    if function is None:
        raise ExprError(f"function '{node.func.id}' is not allowed; {_ALLOWED_HINT}")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise ExprError(f"keyword or * arguments in '{_segment(node)}' are not allowed")
    args = [_eval(a) for a in node.args]
    if function is str and args and isinstance(args[0], int) and abs(args[0]).bit_length() > MAX_INT_BITS:
        raise ExprError("number too large to convert to a string")  # pragma: no cover (bounded above)
    return function(*args)
