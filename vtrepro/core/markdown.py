"""Markdown that quotes values from elsewhere (model names, manifests, specs) without letting them add markup:
the model card of ``export model`` and the README of ``export index``."""
from __future__ import annotations

import html
import re
from typing import Any

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")


def md(value: Any) -> str:
    """``value`` as inline markdown text: one line, HTML and markdown syntax escaped."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def fenced(code: str, language: str = "") -> str:
    """``code`` in a fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code.rstrip()}\n{fence}\n"
