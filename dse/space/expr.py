"""The restricted expression language of derive, divisors_of and constraints.

Expressions are evaluated vectorized over numpy arrays with a whitelisted grammar: numbers,
strings, column names, + - * / // % **, comparisons (chains allowed), and/or/not (also & | ~),
the conditional `a if c else b`, and the functions in `FUNCS`. `//` and `%` by zero give -1
(integers) or NaN instead of raising, so a bad split is a dropped row, not an error.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping

import numpy as np

from dse.space.spec import Ctx


def _is_pow2(x):
    x = np.asarray(x)
    xi = x.astype(np.int64)
    return (x > 0) & (xi == x) & ((xi & (xi - 1)) == 0)


FUNCS = {
    "min": np.minimum, "max": np.maximum, "minimum": np.minimum, "maximum": np.maximum,
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.rint, "sqrt": np.sqrt,
    "log": np.log, "log2": np.log2, "log10": np.log10, "exp": np.exp, "where": np.where,
    "gcd": lambda a, b: np.gcd(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)),
    "lcm": lambda a, b: np.lcm(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)),
    "clip": np.clip, "float": lambda a: np.asarray(a, dtype=float),
    "int": lambda a: np.trunc(a).astype(np.int64), "is_pow2": _is_pow2,
}
CONSTS = {"true": True, "false": False, "inf": math.inf, "pi": math.pi}
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge}


class Expr:
    """A parsed, whitelisted expression; `names` are the columns it reads."""

    def __init__(self, text: str, ctx: Ctx, path: str):
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise ctx.error(path, f"cannot parse expression {text!r} ({exc.msg})") from None
        self.names: list[str] = []
        self._check(tree.body, ctx, path)
        self.tree = tree.body

    def _check(self, node, ctx, path):
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, str, bool)):
                raise ctx.error(path, f"unsupported constant {node.value!r} in {self.text!r}")
        elif isinstance(node, ast.Name):
            if node.id not in CONSTS and node.id not in self.names:
                self.names.append(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            self._check(node.left, ctx, path)
            self._check(node.right, ctx, path)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not, ast.Invert)):
            self._check(node.operand, ctx, path)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                self._check(v, ctx, path)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            self._check(node.left, ctx, path)
            for c in node.comparators:
                self._check(c, ctx, path)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS \
                and not node.keywords:
            for a in node.args:
                self._check(a, ctx, path)
        elif isinstance(node, ast.IfExp):
            for n in (node.test, node.body, node.orelse):
                self._check(n, ctx, path)
        else:
            what = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                else type(node).__name__
            raise ctx.error(path, f"'{what}' is not allowed in {self.text!r}; use arithmetic, "
                                  f"comparisons, and/or/not and {', '.join(sorted(FUNCS))}")

    def __call__(self, env: Mapping):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._eval(self.tree, env)

    def _eval(self, node, env):
        """Evaluate over numpy arrays; numbers never become unbounded Python integers or strings."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return CONSTS[node.id] if node.id in CONSTS else env[node.id]
        if isinstance(node, ast.BinOp):
            a, b = self._eval(node.left, env), self._eval(node.right, env)
            if isinstance(a, str) or isinstance(b, str):
                return _string_op(node.op, a, b)
            if isinstance(node.op, ast.Pow):  # in floating point: 9**9**9 overflows to inf at once
                r = np.power(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
                return r.item() if np.ndim(r) == 0 else r
            if isinstance(node.op, ast.Div):
                return np.true_divide(a, b)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)):  # integer semantics, 0 divisor -> invalid
                a, b = np.asarray(a), np.asarray(b)
                bad = b == 0
                if np.any(bad):
                    b = np.where(bad, 1, b)
                    r = _BINOPS[type(node.op)](a, b)
                    return np.where(bad, -1 if r.dtype.kind in "iu" else np.nan, r)
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.UnaryOp):
            v = self._eval(node.operand, env)
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.Not):
                return np.logical_not(v)
            return np.logical_not(v) if np.asarray(v).dtype == bool else ~np.asarray(v)
        if isinstance(node, ast.BoolOp):
            f = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            out = self._eval(node.values[0], env)
            for v in node.values[1:]:
                out = f(out, self._eval(v, env))
            return out
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            out = True
            for op, comp in zip(node.ops, node.comparators):
                right = self._eval(comp, env)
                out = np.logical_and(out, _CMPOPS[type(op)](left, right))
                left = right
            return out
        if isinstance(node, ast.IfExp):
            return np.where(self._eval(node.test, env), self._eval(node.body, env), self._eval(node.orelse, env))
        return FUNCS[node.func.id](*[self._eval(a, env) for a in node.args])



def eval_checked(ex: Expr, env: dict, ctx: Ctx, path: str):
    """`ex(env)`, with evaluation errors turned into a ConfigError at `path`."""
    try:
        return ex(env)
    except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
        raise ctx.error(path, f"cannot evaluate {ex.text!r}: {exc}") from None


MAX_STRING = 1000  # characters an expression may build


def _string_op(op, a, b):
    """Strings only concatenate, and only to a bounded length (no "a" * 10**10)."""
    if isinstance(op, ast.Add) and isinstance(a, str) and isinstance(b, str) and len(a) + len(b) <= MAX_STRING:
        return a + b
    raise TypeError(f"unsupported string operation {type(op).__name__} on {str(a)[:20]!r}, {str(b)[:20]!r}")
