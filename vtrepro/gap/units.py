"""Surface forms and their normalized units (docs/vocabulary-gap.md, "Definitions").

A vocabulary entry is a *surface form*: a core string with a position mark in the tokenizer's own scheme
(GPT-2's ``Ġ`` and sentencepiece's ``▁`` mark a word start, WordPiece's ``##`` a continuation, CLIP's ``</w>`` a
word end). Its *unit* is the core with the mark stripped, then lowercased; the second level also strips accents.
Byte-level entries are decoded from GPT-2's byte alphabet first, so ``Ã©`` is the ``é`` it spells; a fragment of
a character (not UTF-8 on its own) keeps its bytes as its unit, written ``<bytes:c3>``.

Four normalizations of token ids serve BM25 and matching: ``raw`` (the id itself), ``markers`` (position mark
stripped, case kept), ``case`` (lowercased, mark kept) and ``both`` (the unit).
"""
from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass

NORMALIZATIONS = ("raw", "markers", "case", "both")
"""How token ids are merged before counting or indexing: not at all, across positions, across case, both."""


@dataclass(frozen=True)
class Scheme:
    """How a vocabulary marks a form's position: ``marker`` placed where ``marks`` says."""

    name: str
    marker: str
    marks: str  # "word-start" (prefix), "continuation" (prefix), "word-end" (suffix) or "none"
    byte_level: bool = False

    def split(self, entry: str) -> tuple[bool, str]:
        """``(marked, core)``: whether ``entry`` carries the marker, and the entry without it."""
        if self.marks == "none":
            return False, entry
        if self.marks == "word-end":
            marked = entry.endswith(self.marker) and len(entry) > len(self.marker)
            return marked, entry[: -len(self.marker)] if marked else entry
        marked = entry.startswith(self.marker) and len(entry) > len(self.marker)
        return marked, entry[len(self.marker):] if marked else entry

    def carries_marker(self, entry: str) -> bool:
        """Whether ``entry`` begins (ends, for a word-end scheme) with the marker, the marker alone included."""
        if self.marks == "none":
            return False
        return entry.endswith(self.marker) if self.marks == "word-end" else entry.startswith(self.marker)

    def mark(self, core: str) -> str:
        """``core`` with the marker where this scheme puts it."""
        return core + self.marker if self.marks == "word-end" else self.marker + core

    def text(self, core: str) -> str | None:
        """The text ``core`` spells: byte-level cores decoded from GPT-2's byte alphabet (None for a fragment
        of a character); other schemes' cores are text already."""
        return _decode_bytes(core) if self.byte_level else core


BYTE_LEVEL = Scheme("byte-level BPE", "Ġ", "word-start", byte_level=True)
SENTENCEPIECE = Scheme("sentencepiece", "▁", "word-start")
WORDPIECE = Scheme("WordPiece", "##", "continuation")
END_OF_WORD = Scheme("end-of-word BPE", "</w>", "word-end", byte_level=True)
UNMARKED = Scheme("unmarked", "", "none")
"""A vocabulary whose entries carry no position mark (word-level tokenizers): forms differ by case alone."""
SCHEMES = (BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, END_OF_WORD, UNMARKED)


@functools.cache
def byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte (character -> byte): printable Latin-1 bytes stand for
    themselves, the other 68 bytes are shifted to U+0100 onwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [byte for byte in range(256) if byte not in printable]
    alphabet = {chr(byte): byte for byte in printable}
    alphabet.update({chr(256 + offset): byte for offset, byte in enumerate(shifted)})
    return alphabet


def _raw_bytes(core: str) -> bytes:
    """The bytes a byte-level core stands for (a character outside the byte alphabet, as added tokens hold,
    stands for its own UTF-8 bytes)."""
    alphabet = byte_alphabet()
    return b"".join(bytes([alphabet[char]]) if char in alphabet else char.encode("utf-8") for char in core)


def _decode_bytes(core: str) -> str | None:
    try:
        return _raw_bytes(core).decode("utf-8")
    except UnicodeDecodeError:
        return None


def strip_accents(text: str) -> str:
    """``text`` without combining marks after canonical decomposition (``é`` -> ``e``)."""
    return "".join(char for char in unicodedata.normalize("NFD", text) if not unicodedata.combining(char))


@dataclass(frozen=True)
class Form:
    """One vocabulary entry read in its scheme: its position mark, its text and its units."""

    entry: str
    marked: bool
    text: str  # the core's text; a fragment of a character is written <bytes:..>
    unit: str
    unit_without_accents: str

    def key(self, normalization: str) -> tuple[bool, str] | str:
        """What ``normalization`` keeps of this form (``raw``: the entry itself)."""
        if normalization == "raw":
            return self.entry
        if normalization == "markers":
            return self.text
        if normalization == "case":
            return (self.marked, self.unit)
        return self.unit


def read_form(entry: str, scheme: Scheme) -> Form:
    """``entry`` split into its mark and core, the core decoded, lowercased and stripped of accents."""
    marked, core = scheme.split(entry)
    text = scheme.text(core)
    if text is None:
        text = f"<bytes:{_raw_bytes(core).hex()}>"
        return Form(entry, marked, text, text, text)
    unit = text.lower()
    return Form(entry, marked, text, unit, strip_accents(unit))
