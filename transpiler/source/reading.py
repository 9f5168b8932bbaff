"""Read, decode and parse one source file; locate its `# noqa` comments.

The front end parses with the standard library's `ast` (a C parser): over the
transformers tree it parses about 9x faster than libcst, whose position metadata
costs another 3.5x (docs/architecture.md has the numbers). libcst is reserved for
the stages that rewrite source and must keep its formatting.
"""

from __future__ import annotations

import ast
from pathlib import Path
import io
import re
import tokenize
import warnings
from dataclasses import dataclass

# Larger files are not analysed (nor compiled): reported as TP901 and copied unchanged. Five times the
# largest file of transformers' models (196 KB); the analysis holds a file's syntax tree several times
# over, so a 30 MB generated file would take gigabytes.
MAX_SOURCE_BYTES = 1 << 20

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)


class SourceError(Exception):
    """The file cannot be analysed. `line`/`col` are 1-based."""

    def __init__(self, code: str, message: str, line: int = 1, col: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.col = col


@dataclass
class Source:
    text: str
    lines: list[str]
    tree: ast.Module

    def char_col(self, line: int, byte_col: int) -> int:
        """1-based character column from `ast`'s 0-based UTF-8 byte offset."""
        if not 1 <= line <= len(self.lines):
            return byte_col + 1
        text = self.lines[line - 1]
        if text.isascii():
            return byte_col + 1
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace")) + 1

    def char_span(self, line: int, col: int, end_line: int, end_col: int) -> tuple[int, int, int, int]:
        """An `ast` span (byte offsets) as 0-based character columns, as libcst counts them."""
        return line, self.char_col(line, col) - 1, end_line, self.char_col(end_line, end_col) - 1


def decode(data: bytes) -> str:
    """Decode as Python does (BOM, PEP 263 cookie, UTF-8 default)."""
    if b"\x00" in data:
        raise SourceError("TP902", "binary file (contains NUL bytes)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise SourceError("TP902", f"cannot decode file as {err.encoding}: {err.reason}", line, col) from None
    except (SyntaxError, LookupError) as err:
        raise SourceError("TP902", f"cannot decode file: {err}") from None


def parse(data: bytes) -> Source:
    if len(data) > MAX_SOURCE_BYTES:
        size, limit = len(data) / (1 << 20), MAX_SOURCE_BYTES / (1 << 20)
        raise SourceError("TP901", f"file too large to analyse ({size:.1f} MiB; the limit is {limit:g} MiB)")
    text = decode(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences are not our business
            tree = ast.parse(text)
    except SyntaxError as err:
        line = err.lineno or 1
        col = err.offset or 1
        raise SourceError("TP901", f"syntax error: {err.msg}", line, max(col, 1)) from None
    except (ValueError, RecursionError, MemoryError) as err:
        raise SourceError("TP901", f"cannot parse file: {err}") from None
    return Source(text, text.splitlines(), tree)


def noqa_directives(text: str) -> dict[int, tuple[int, frozenset[str] | None]]:
    """Map line -> (1-based column of the comment, codes or None for a bare noqa).

    Uses the tokenizer so that `# noqa` inside a string is not a directive; only
    called for files that contain the text "noqa".
    """
    found: dict[int, tuple[int, frozenset[str] | None]] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        match = _NOQA.search(tok.string)
        if match is None:
            continue
        codes = match.group("codes")
        parsed = frozenset(c.upper() for c in re.split(r"[,\s]+", codes) if c) if codes else None
        found[tok.start[0]] = (tok.start[1] + match.start() + 1, parsed)
    return found


def read_source(path: Path) -> str:
    """The text of a source file, decoded as Python decodes it, line endings kept."""
    with open(path, encoding=_encoding(path), newline="") as handle:
        return handle.read()


def encode_source(path: Path, text: str) -> bytes:
    """`text` encoded as the file at `path` is (its PEP 263 cookie or BOM, else UTF-8)."""
    return text.encode(_encoding(path))


def _encoding(path: Path) -> str:
    with open(path, "rb") as handle:
        return tokenize.detect_encoding(handle.readline)[0]
