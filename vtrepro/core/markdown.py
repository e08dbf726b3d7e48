"""Markdown that quotes values from elsewhere (model names, manifests, specs) without letting them add markup:
the model card of ``export model`` (:func:`md`, escaped text) and the README of ``export index`` (:func:`code`,
code spans that read cleanly as plain text too)."""
from __future__ import annotations

import html
import re
from typing import Any

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~$])")


def md(value: Any) -> str:
    """``value`` as inline markdown text: one line, HTML and markdown syntax escaped."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def code(value: Any) -> str:
    """``value`` as an inline code span: one line, shown literally (a code span holds no markup), so it reads the
    same as plain text; the fence is one backtick longer than any run inside, and padded where the value starts
    or ends with one."""
    text = " ".join(str(value).split()) or " "
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fenced(code: str, language: str = "") -> str:
    """``code`` in a fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code.rstrip()}\n{fence}\n"
