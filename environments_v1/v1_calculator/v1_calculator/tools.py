"""The calculator tool: integer + - * and parentheses, evaluated from the syntax tree (no eval)."""

from __future__ import annotations

import ast
import json
import operator

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
MAX_MAGNITUDE = 10**12  # keeps a model's 9**9**9 from hanging the tool


class CalculatorError(ValueError):
    """An expression the calculator does not evaluate."""


def evaluate(expression: str) -> int:
    try:
        tree = ast.parse(str(expression), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"not an expression: {expression!r}") from e
    return _value(tree.body)


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        result = OPERATORS[type(node.op)](_value(node.left), _value(node.right))
        if abs(result) > MAX_MAGNITUDE:
            raise CalculatorError(f"result beyond {MAX_MAGNITUDE}")
        return result
    raise CalculatorError(f"only integers, + - * and parentheses: {ast.dump(node)[:60]}")


SCHEMA = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an integer expression with + - * and parentheses.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}


def call(name: str, arguments: str) -> str:
    """The tool message for one call (errors are told to the model, as a tool would)."""
    if name != "calculate":
        return f"error: unknown tool {name!r}; the only tool is calculate"
    try:
        return str(evaluate(json.loads(arguments or "{}").get("expression", "")))
    except (CalculatorError, ValueError, AttributeError) as e:
        return f"error: {e}"
