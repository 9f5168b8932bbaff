"""Generated Python laid out as black lays it out at line length 120, without running black.

The emitters write each statement on one line; `layout` breaks those that are too long (or hold a magic
trailing comma) the way black does for the shapes they generate: a `def` at its parameters; an
assignment or `return` at its last bracket when black omits the optional parentheses around the value,
else inside added parentheses; any other line at its last bracket. Inside brackets a line splits at its
lowest-priority operators (one element a line, a trailing comma after each where those are commas),
else at its last bracket again. A statement of a shape not handled here keeps its one line, marked
`# fmt: skip` so that black leaves it as it is. Formatting costs time only for the few long lines.
tests/test_layout.py checks that black would change nothing, over the goldens and fuzzer-made regions.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

LINE_LENGTH = 120
INDENT = "    "
SKIP = "  # fmt: skip"
# Delimiter priorities (black's): a line splits at the delimiters of the highest priority it holds.
_COMMA, _TERNARY, _LOGIC, _COMPARATOR, _DOT = 18, 16, 14, 10, 1
_MATH = {"|": 9, "^": 8, "&": 7, "<<": 6, ">>": 6, "+": 5, "-": 5, "*": 4, "/": 4, "//": 4, "%": 4, "@": 4, "**": 2}
_COMPARATORS = {"<", ">", "==", "!=", "<=", ">=", "in", "not", "is"}
_OPENING, _CLOSING = "([{", ")]}"
# After these a `-`, `+`, `~`, `*` or `**` is unary (or unpacking), not an operator.
_BEFORE_UNARY = {"(", "[", "{", ",", "=", ":", "return", "lambda", "and", "or", "not", "in", "is", "if", "else"}


class _Unhandled(Exception):
    """A line of a shape this module does not lay out as black would."""


@dataclass(frozen=True)
class _Token:
    text: str
    start: int  # column in the line's text (without its indentation)
    end: int
    depth: int  # brackets open before it (an opening bracket is outside itself, a closing one too)
    priority: int  # as a delimiter at its depth: 0 if it is none
    match: int  # for a bracket: the index of its partner


def layout(line: str, inside: bool = False) -> list[str]:
    """`line` (one logical line with its indentation, no newline) as black would lay it out; `inside`: the
    line is an element inside brackets (`f(` above it), so that its operators may split it."""
    indent = line[: len(line) - len(line.lstrip())]
    try:
        return _lay(line.strip(), indent, inside, statement=not inside)
    except (_Unhandled, tokenize.TokenError, IndentationError):
        return [line + SKIP]


def layout_text(text: str) -> str:
    """Every line of `text` that black would change for its length or its magic trailing comma, laid out
    (statement lines only: comment lines and lines with an inline comment are left as they are)."""
    out: list[str] = []
    in_string = False  # inside a docstring of several lines: its lines are text, not code
    for line in text.split("\n"):
        quotes = line.count('"""') % 2 == 1
        if in_string or quotes or _fits(line) or line.lstrip().startswith(("#", '"""')) or "  # " in line:
            out.append(line)
        else:
            out += layout(line)
        in_string ^= quotes
    return "\n".join(out)


def _fits(line: str) -> bool:
    """Short enough, and without a comma before a closing bracket (which may be magic) but a one-element
    tuple's of names or literals (`("x",)`, which is not): no need to tokenize it."""
    return len(line) <= LINE_LENGTH and not _MAY_BE_MAGIC.search(_ONE_TUPLE.sub("()", line))


_ONE_TUPLE = re.compile(r"(?<![\w)\]])\([^(),\[\]{}]*,\)")
_MAY_BE_MAGIC = re.compile(r",\s*[)\]}]")


def _tokens(text: str) -> list[_Token]:
    raw = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)
    ]
    if any(t.type == tokenize.COMMENT or t.start[0] != 1 for t in raw):
        raise _Unhandled("comments and multi-line tokens")
    tokens: list[_Token] = []
    stack: list[int] = []
    lambdas = 0  # lambda parameters lie one level deeper (their commas do not split the line)
    for index, t in enumerate(raw):
        value = t.string
        depth = len(stack) + lambdas
        previous = raw[index - 1].string if index else None
        match = -1
        if value in _OPENING:
            stack.append(index)
        elif value in _CLOSING:
            match = stack.pop()
            depth -= 1
            tokens[match] = _replace_match(tokens[match], index)
        priority = _priority(t, previous, raw[index + 1].string if index + 1 < len(raw) else None)
        tokens.append(_Token(value, t.start[1], t.end[1], depth, priority, match))
        if value == "lambda":
            lambdas += 1
        elif value == ":" and lambdas:
            lambdas -= 1
    return tokens


def _replace_match(token: _Token, match: int) -> _Token:
    return _Token(token.text, token.start, token.end, token.depth, token.priority, match)


def _priority(t: tokenize.TokenInfo, previous: str | None, following: str | None) -> int:
    """The token's priority as a delimiter: a line splits after a comma, before an operator."""
    value = t.string
    if value == ",":
        return _COMMA
    unary = previous is None or previous in _BEFORE_UNARY or previous in _MATH or previous in _COMPARATORS
    if value in _MATH:
        return 0 if unary else _MATH[value]
    # `not` alone is unary, and `not in` is one comparator
    unary_or_second = (value == "not" and following != "in") or (value == "in" and previous == "not")
    if value in _COMPARATORS and not unary_or_second:
        return _COMPARATOR if not (value == "is" and previous is None) else 0
    if value in ("and", "or"):
        return _LOGIC
    if value in ("if", "else") and previous is not None:
        return _TERNARY
    if value == "." and previous is not None and previous in _CLOSING:
        return _DOT  # a method of a call's result; `a.b.c` is one name
    return 0


def _lay(text: str, indent: str, inside: bool, statement: bool) -> list[str]:
    if len(indent) + len(text) <= LINE_LENGTH and _fits(text):
        return [indent + text]  # no comma before a closing bracket: no need to tokenize
    tokens = _tokens(text)
    if len(indent) + len(text) <= LINE_LENGTH and not _magic_comma(tokens):
        return [indent + text]
    if inside:
        split = _delimiter_split(text, tokens)
        if split is not None and split != [text]:
            return [line for piece in split for line in _lay(piece, indent, True, False)]
    if statement and tokens[0].text == "def":
        opening = next(i for i, t in enumerate(tokens) if t.text == "(")
        return _bracket_split(text, tokens, opening, indent, is_def=True)
    value = _value_start(tokens) if statement else None
    if value is not None:
        return _lay_value(text, tokens, value, indent)
    closing = _last_closing(tokens)
    if closing is None:
        return [indent + text]  # nothing to split at: black leaves the line long
    return _bracket_split(text, tokens, tokens[closing].match, indent)


_ASSIGNING = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%="})  # an augmented assignment's value splits alike


def _value_start(tokens: list[_Token]) -> int | None:
    """Where the value of `name = value` or `return value` starts: black puts it in optional parentheses."""
    if tokens[0].text == "return" and len(tokens) > 1:
        return 1
    if len(tokens) > 2 and re.fullmatch(r"[A-Za-z_]\w*", tokens[0].text) and tokens[1].text in _ASSIGNING:
        return 2
    return None


def _lay_value(text: str, tokens: list[_Token], start: int, indent: str) -> list[str]:
    """An assignment's or return's value: split at its last bracket where black omits the optional
    parentheses around it, else inside them."""
    value = tokens[start:]
    if value[0].text == "(" and value[0].match == len(tokens) - 1:
        # Parentheses of its own (a tuple): black keeps them, and splits there.
        return _bracket_split(text, tokens, start, indent)
    delimiters = [t.priority for t in value if t.depth == 0 and t.priority]
    omit = _can_omit_parentheses(text, tokens, start, delimiters, len(indent))
    if omit:
        closing = _last_closing(tokens)
        if closing is None:
            raise _Unhandled("no bracket to split at")
        return _bracket_split(text, tokens, tokens[closing].match, indent)
    head = text[: tokens[start].start].rstrip()
    body = text[tokens[start].start :]
    return [f"{indent}{head} (", *_lay(body, indent + INDENT, True, False), f"{indent})"]


def _can_omit_parentheses(text: str, tokens: list[_Token], start: int, delimiters: list[int], width: int) -> bool:
    """black's `can_omit_invisible_parens` for the shapes generated here."""
    if not delimiters:
        return True
    top = max(delimiters)
    if delimiters.count(top) > 1:
        return False
    if top == _DOT:
        return True
    last = tokens[-1]
    if last.text in ")}" and tokens[-2].text not in _OPENING:
        # The value up to its last bracket fits on the line, or other brackets come before it.
        opening = last.match
        if any(t.text in _OPENING for t in tokens[start:opening]):
            return True
        if width + len(INDENT) + tokens[opening].end - tokens[start].start <= LINE_LENGTH:
            return True
    if tokens[start].text in _OPENING:
        raise _Unhandled("a value that starts with a bracket")
    return False


def _last_closing(tokens: list[_Token]) -> int | None:
    return next((i for i in range(len(tokens) - 1, -1, -1) if tokens[i].text in _CLOSING), None)


def _bracket_split(text: str, tokens: list[_Token], opening: int, indent: str, is_def: bool = False) -> list[str]:
    """Head (up to the opening bracket), body (inside, one level deeper), tail (from the closing bracket)."""
    closing = tokens[opening].match
    head = text[: tokens[opening].end]
    body = text[tokens[opening].end : tokens[closing].start].strip()
    tail = text[tokens[closing].start :]
    if len(indent) + len(head) > LINE_LENGTH or len(indent) + len(tail) > LINE_LENGTH:
        raise _Unhandled("a head or tail still too long")  # black would try other brackets
    if not body:
        raise _Unhandled("empty brackets")
    inner = tokens[opening + 1 : closing]
    commas = [t for t in inner if t.depth == tokens[opening].depth + 1 and t.text == ","]
    trailing = bool(commas) and inner[-1] is commas[-1]
    if is_def and not commas:
        body, trailing = body + ",", True  # black: a lone parameter gets a trailing comma
    # black splits the elements one a line where the body has a trailing comma, or is a tuple, list or dict.
    atom = opening == 0 or tokens[opening - 1].text in _BEFORE_UNARY or tokens[opening - 1].priority > 0
    if len(commas) > trailing and (trailing or atom):
        pieces = _split_at(body, _tokens(body), _COMMA)
        lines = [line for piece in pieces for line in _lay(piece, indent + INDENT, True, False)]
    else:
        lines = _lay(body, indent + INDENT, True, False)
    return [indent + head, *lines, indent + tail]


def _delimiter_split(text: str, tokens: list[_Token]) -> list[str] | None:
    counted = tokens[:-1] if tokens[-1].text == "," else tokens  # a trailing comma does not count
    top = max((t.priority for t in counted if t.depth == 0), default=0)
    return _split_at(text, tokens, top) if top else None


def _split_at(text: str, tokens: list[_Token], priority: int) -> list[str]:
    """`text` split at its depth-0 delimiters of `priority`: after commas (each piece then ends with one),
    before operators."""
    pieces, start = [], 0
    for t in tokens:
        if t.depth == 0 and t.priority == priority:
            if priority == _COMMA:
                pieces.append(text[start : t.end].strip())
                start = t.end
            else:
                pieces.append(text[start : t.start].strip())
                start = t.start
    rest = text[start:].strip()
    if rest:
        pieces.append(rest + ("," if priority == _COMMA else ""))
    return [p for p in pieces if p]


def _magic_comma(tokens: list[_Token]) -> bool:
    """A comma before a closing bracket that black keeps exploded: all but a one-element tuple's."""
    for index, t in enumerate(tokens):
        if t.text in _CLOSING and index and tokens[index - 1].text == ",":
            if t.text != ")":
                return True
            opening = t.match
            commas = sum(1 for u in tokens[opening + 1 : index] if u.text == "," and u.depth == t.depth + 1)
            is_tuple = opening == 0 or tokens[opening - 1].text in _BEFORE_UNARY or tokens[opening - 1].priority > 0
            if commas > 1 or not is_tuple:
                return True
    return False


# -- what black changes within a line --------------------------------------------------------
_SIMPLE = r"(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|\d[\d.]*(?:e[+-]?\d+)?)"
_POWER = re.compile(rf"(?<![\w.)\]])({_SIMPLE}) \*\* (-?{_SIMPLE})(?![\w.(\[])")


def hug_powers(expression: str) -> str:
    """`x ** 2` as black writes it where both operands are simple (names, numbers, attributes): `x**2`."""
    return _POWER.sub(r"\1**\2", expression) if "**" in expression else expression


def double_quoted(expression: str) -> str:
    """The single-quoted strings of `expression` (Python source) in double quotes, as black writes them
    (a string holding a double quote or a backslash keeps its quotes)."""
    if "'" not in expression:
        return expression
    tokens = list(tokenize.generate_tokens(io.StringIO(expression).readline))
    for t in reversed([t for t in tokens if t.type == tokenize.STRING]):
        value = t.string
        if value.startswith("'") and '"' not in value and "\\" not in value:
            quoted = '"' + value[1:-1] + '"'
            expression = expression[: t.start[1]] + quoted + expression[t.end[1] :]
    return expression


def import_lines(module: str, names: list[str], indent: str = "") -> list[str]:
    """`from module import names`, one name a line in parentheses where it is too long (as black)."""
    line = f"{indent}from {module} import {', '.join(names)}"
    if len(line) <= LINE_LENGTH:
        return [line]
    return [f"{indent}from {module} import (", *(f"{indent}{INDENT}{name}," for name in names), f"{indent})"]
