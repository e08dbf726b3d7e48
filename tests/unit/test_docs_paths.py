"""The docs name files that exist (issue 43): every repository path that README.md or a page of ``docs/``
names in inline code or a link (``vtrepro/...``, ``tests/...``, ``scripts/...``, ``docs/...``,
``regressions/...``) is a file or folder of the checkout, and every relative link leads to one. A pattern
(``vtrepro/<stage>/command.py``, ``part-*.jsonl``) is not a path; a test's ``::name`` or a ``:line`` after
the path is dropped."""
from __future__ import annotations

import re

from helpers import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:vtrepro|tests|scripts|docs|regressions)/[^\s`'\"),;]*)")
PATTERN = re.compile(r"[<>*{}\[\]]|\.\.\.")


def named_paths(text: str) -> set[str]:
    """The repository paths a page names in inline code or links (fenced blocks are commands, not names)."""
    text = FENCE.sub("", text)
    spans = [*CODE.findall(text), *LINK.findall(text)]
    found = set()
    for span in spans:
        for path in PATH.findall(span):
            path = re.split(r"::|#|:\d", path)[0].rstrip(".:")
            if not PATTERN.search(path):
                found.add(path)
    return found


def relative_links(text: str) -> set[str]:
    """The targets of a page's links to the page's neighbours (``[x](performance.md#y)``), anchors dropped."""
    targets = {target.split("#")[0] for target in LINK.findall(FENCE.sub("", text))}
    return {target for target in targets if target and not re.match(r"[a-z]+:|/", target)}


def test_every_path_the_docs_name_exists():
    missing = [f"{page.relative_to(REPO_ROOT)}: {path}" for page in PAGES
               for path in sorted(named_paths(page.read_text(encoding="utf-8"))) if not (REPO_ROOT / path).exists()]
    assert not missing, "the docs name paths the repository does not hold:\n" + "\n".join(missing)


def test_every_relative_link_of_the_docs_leads_to_a_file():
    missing = [f"{page.relative_to(REPO_ROOT)}: {target}" for page in PAGES
               for target in sorted(relative_links(page.read_text(encoding="utf-8")))
               if not (page.parent / target).exists()]
    assert not missing, "the docs link to files the repository does not hold:\n" + "\n".join(missing)


def test_the_reader_finds_code_and_links_and_skips_patterns():
    text = ("`vtrepro/core/io.py` and [a](docs/security.md#bundles), `python scripts/x.py --y`,\n"
            "`tests/unit/a.py::test_b`, `vtrepro/<stage>/command.py`, `part-*.jsonl`, `vtrepro/a.py:12`\n"
            "```\nvtrepro/fenced.py\n```\n")
    assert named_paths(text) == {"vtrepro/core/io.py", "docs/security.md", "scripts/x.py", "tests/unit/a.py",
                                 "vtrepro/a.py"}
    assert relative_links("[a](scale.md#b) [c](https://x.org/y.md) [d](#e) [f](../README.md)") == {"scale.md",
                                                                                                  "../README.md"}
