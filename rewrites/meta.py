"""TP9xx: findings about the lint run itself (unreadable files, unused suppressions).

These rules are raised by the engine, not by visiting code, and make no claim
about Dynamo.
"""

from __future__ import annotations

from transpiler.lint.rule import FILE_CODES, Rule


class UnusedNoqa(Rule):
    """## What it does
    Checks for `# noqa: TPxxx` comments that suppress nothing: the code is
    unknown, or no finding of that code is on the line.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line. Bare
    `# noqa` comments are left alone: they may belong to another linter.

    ## Fix safety
    Removing the stale code from the comment is safe.
    """

    code = "TP900"
    name = FILE_CODES[code]
    summary = "unused `noqa` directive"
    message = "unused `noqa` directive"
    family = "meta"


class SyntaxErrorInFile(Rule):
    """## What it does
    Reports files that are not valid Python, or nested too deeply for Python's
    own parser or for the analysis.

    ## Why is this bad?
    The file cannot be analysed (or compiled); nothing else is reported for it.

    ## Fix safety
    No fix.
    """

    code = "TP901"
    name = FILE_CODES[code]
    summary = "file does not parse or cannot be analysed"
    message = "syntax error"
    family = "meta"


class UnreadableFile(Rule):
    """## What it does
    Reports files that cannot be read or decoded: I/O errors, binary content,
    text that is not in the declared encoding.

    ## Why is this bad?
    The file cannot be analysed; nothing else is reported for it.

    ## Fix safety
    No fix.
    """

    code = "TP902"
    name = FILE_CODES[code]
    summary = "file cannot be read or decoded"
    message = "cannot read file"
    family = "meta"
