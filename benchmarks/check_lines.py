"""The share of the package's code lines that check arguments (issue: checks declared, not written).

Code lines are the non-blank lines of ``icl_utils/**/*.py`` outside comments and docstrings. A line checks
arguments when it belongs to
- ``icl_utils/checks.py`` or ``icl_utils/declared.py`` (the check helpers and the declared-check machinery),
- an ``if`` statement whose body only raises ``ValueError``/``TypeError`` (its test and its message),
- a statement whose value is a call of a ``checks.`` helper (``n = checks.positive_int("n", n)``),
- a ``raise ValueError``/``raise TypeError`` statement elsewhere (a hand-written refusal), or
- a decorator that declares checks (``@checked``, ``@jaxtyped``),
- a module-level declared type (``Grid = Annotated[..., Is[...]]``, ``describe(...)``, ``declare(...)``,
  ``mapping_of(...)``, ``sequence_of(...)``) or a function a validator calls (``Is[_grid]``, ``mapping_of(_number)``).

Annotations are not counted: a parameter is declared whether or not its type is checked.

Run: ``python benchmarks/check_lines.py`` (add ``--files`` for the share per file)."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFUSALS = {"ValueError", "TypeError"}
DECLARING = {"checked", "jaxtyped", "beartype"}
#: a module-level statement that uses one of these declares a check: an alias ``Grid = Annotated[..., Is[...]]``,
#: its description (``describe``), or one made by a factory of :mod:`icl_utils.declared`
DECLARING_CALLS = {"Is", "describe", "declare", "mapping_of", "sequence_of"}


def _names(node: ast.AST) -> set[str]:
    """The names and attribute names that occur in ``node``."""
    return {
        n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))
    }


def _raises_refusal(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id in REFUSALS


def _calls_checks(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    while isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "checks":
            return True
        value = func.value if isinstance(func, ast.Attribute) else None
    return False


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count(path: Path) -> tuple[int, int]:
    """(code lines, argument-check lines) of one file."""
    text = path.read_text()
    tree = ast.parse(text)
    skip = _docstring_lines(tree)
    code = {
        i
        for i, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and i not in skip
    }
    if path.name in ("checks.py", "declared.py"):
        return len(code), len(code)
    checking: set[int] = set()
    validators = {  # functions a declared check calls: Is[_grid], Is[lambda v: _grid(v, 0)], mapping_of(_number)
        n.id
        for sub in ast.walk(tree)
        if (isinstance(sub, ast.Subscript) and _names(sub.value) & {"Is"})
        or (isinstance(sub, ast.Call) and _names(sub.func) & DECLARING_CALLS - {"Is"})
        for n in ast.walk(sub.slice if isinstance(sub, ast.Subscript) else sub)
        if isinstance(n, ast.Name)
    }
    for node in ast.walk(tree):
        refuses = isinstance(node, ast.If) and all(_raises_refusal(s) for s in node.body) and not node.orelse
        declares = (
            node in tree.body
            and isinstance(node, (ast.Assign, ast.AnnAssign, ast.Expr))
            and (_names(node) & DECLARING_CALLS)
        )
        validator = isinstance(node, ast.FunctionDef) and node in tree.body and node.name in validators
        if (
            refuses
            or declares
            or validator
            or _raises_refusal(node)
            or (isinstance(node, ast.stmt) and _calls_checks(node))
        ):
            checking.update(range(node.lineno, node.end_lineno + 1))
        for dec in getattr(node, "decorator_list", []):
            if _names(dec) & DECLARING:
                checking.update(range(dec.lineno, dec.end_lineno + 1))
    return len(code), len(checking & code)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", action="store_true", help="the share per file too")
    args = parser.parse_args(argv)
    total = checked = 0
    for path in sorted((ROOT / "icl_utils").rglob("*.py")):
        c, k = count(path)
        total, checked = total + c, checked + k
        if args.files and c:
            print(f"{path.relative_to(ROOT)!s:45} {k:5d} / {c:5d}  {100 * k / c:5.1f}%")
    share = checked / total
    print(f"argument checks: {checked} of {total} code lines ({100 * share:.1f}%)")
    return share


if __name__ == "__main__":
    main()
