"""Source/target vocabulary matching: canonical token forms, special-token roles and the overlap.

Every vocabulary entry is reduced to its text (WordPiece ``##``, byte-level ``Ġ`` and SentencePiece
``▁`` markers removed, GPT-2 byte characters decoded, the target tokenizer's normalizer applied) and
its position (word start or continuation). :func:`match_vocabularies` pairs every target id with its
source rows: a special-token equivalent, one exact copy, a weighted merge of several, or none (new).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import parse_json

# tokenizers and transformers are only type hints here, so importing this module stays fast (see transfer.py).
if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

SAME_POSITION_WEIGHT = 2.0
SAME_SPELLING_WEIGHT = 2.0

ROLES = ("cls", "sep", "pad", "mask", "unk", "bos", "eos")
ROLE_FALLBACK = {
    "cls": ("cls", "bos"),
    "sep": ("sep", "eos"),
    "bos": ("bos", "cls"),
    "eos": ("eos", "sep"),
    "pad": ("pad",),
    "mask": ("mask",),
    "unk": ("unk",),
}
SPECIAL_NAMES = {
    "[CLS]": "cls", "<cls>": "cls", "[SEP]": "sep", "<sep>": "sep", "<s>": "bos", "</s>": "eos",
    "[PAD]": "pad", "<pad>": "pad", "[MASK]": "mask", "<mask>": "mask", "[UNK]": "unk", "<unk>": "unk",
}


# ---------------------------------------------------------------------------- canonical forms


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (``Ġ`` is the space byte)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, characters)))


BYTE_ENCODER = _bytes_to_unicode()
BYTE_DECODER = {character: byte for byte, character in BYTE_ENCODER.items()}


def decode_byte_level(token: str) -> str | None:
    """Text of a byte-level BPE token, or None when it is not whole UTF-8 (a partial character)."""
    try:
        return bytes(BYTE_DECODER[character] for character in token).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None


class TokenForm(NamedTuple):
    """A vocabulary entry without its marker: ``spelling`` as stored, ``text`` normalized."""

    spelling: str
    text: str
    word_start: bool


@dataclass(frozen=True)
class VocabularyScheme:
    """How a vocabulary marks word boundaries.

    ``unmarked_word_start``: the first word of a text gets no marker (byte-level BPE without
    ``add_prefix_space``), so unmarked entries start words too.
    """

    continuation_prefix: str | None = None
    word_start_marker: str | None = None
    byte_level: bool = False
    unmarked_word_start: bool = False

    def split(self, token: str) -> tuple[str, bool] | None:
        """``(spelling, word_start)`` of an entry; None for one without text (a lone marker, a byte piece)."""
        if self.byte_level:
            decoded = decode_byte_level(token)
            if decoded is None:
                return None
            token = decoded
        prefix, marker = self.continuation_prefix, self.word_start_marker
        if prefix and token.startswith(prefix) and len(token) > len(prefix):
            spelling, word_start = token[len(prefix):], False
        elif marker:
            word_start = token.startswith(marker)
            spelling = token[len(marker):] if word_start else token
        else:
            spelling, word_start = token, True
        return (spelling, word_start) if spelling.strip() else None

    def can_start_word(self, form: TokenForm) -> bool:
        """Whether the entry can begin a word."""
        return form.word_start or self.unmarked_word_start


def _components(node: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """A tokenizer.json component and the members of any ``Sequence`` inside it."""
    if not node:
        return
    yield node
    for key in ("pretokenizers", "decoders", "normalizers"):
        for member in node.get(key) or []:
            yield from _components(member)


def fast_backend(tokenizer: PreTrainedTokenizerBase) -> Tokenizer:
    """The tokenizers-library object behind a fast tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise VtreproError(f"{type(tokenizer).__name__} {tokenizer.name_or_path}: not a fast tokenizer; "
                           "vocabulary transfer needs one with a tokenizer.json")
    return backend


def tokenizer_spec(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """A fast tokenizer's ``tokenizer.json`` as the tokenizers library writes it, parsed by the one bounded reader."""
    spec: dict[str, Any] = parse_json(fast_backend(tokenizer).to_str(), f"the tokenizer of {tokenizer.name_or_path}",
                                      "give a model whose tokenizer.json the tokenizers library reads")
    return spec


def vocabulary_scheme(tokenizer: PreTrainedTokenizerBase) -> VocabularyScheme:
    """Detect WordPiece ``##``, byte-level BPE and SentencePiece ``▁`` vocabularies from tokenizer.json."""
    spec = tokenizer_spec(tokenizer)
    splitters = list(_components(spec.get("pre_tokenizer")))
    parts = [*splitters, *_components(spec.get("decoder"))]
    model = spec["model"]
    prefix = model.get("continuing_subword_prefix") or ("##" if model["type"] == "WordPiece" else None)
    byte_level = [part for part in splitters if part["type"] == "ByteLevel"]
    if byte_level or any(part["type"] == "ByteLevel" for part in parts):
        unmarked = bool(byte_level) and not byte_level[0].get("add_prefix_space", False)
        return VocabularyScheme(prefix, " ", byte_level=True, unmarked_word_start=unmarked)
    metaspace = next((part for part in parts if part["type"] == "Metaspace"), None)
    if metaspace is not None:
        unmarked = metaspace.get("prepend_scheme") == "never" or metaspace.get("add_prefix_space") is False
        return VocabularyScheme(prefix, metaspace.get("replacement", "▁"), unmarked_word_start=unmarked)
    tokens = list(tokenizer.get_vocab())
    if prefix is None and sum(token.startswith("▁") for token in tokens) > 0.2 * len(tokens):
        return VocabularyScheme(None, "▁")
    return VocabularyScheme(prefix)


def text_normalizer(tokenizer: PreTrainedTokenizerBase) -> Callable[[str], str]:
    """The tokenizer's own normalization (case folding, accent stripping, ...) followed by strip()."""
    normalizer = fast_backend(tokenizer).normalizer
    if normalizer is None:
        return str.strip
    return lambda text: normalizer.normalize_str(text).strip()


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids of special tokens: the named ones and every added token flagged special."""
    ids = set(tokenizer.all_special_ids)
    ids.update(index for index, added in tokenizer.added_tokens_decoder.items() if added.special)
    return ids


def special_roles(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """``{role: id}`` for cls/sep/pad/mask/unk/bos/eos, from the tokenizer's attributes or well-known names."""
    roles = {}
    for role in ROLES:
        index = getattr(tokenizer, f"{role}_token_id", None)
        if isinstance(index, int):
            roles[role] = index
    for index, added in tokenizer.added_tokens_decoder.items():
        named = SPECIAL_NAMES.get(added.content)
        if named and added.special:
            roles.setdefault(named, index)
    return roles


def role_id(roles: dict[str, int], role: str) -> int | None:
    """Id of ``role`` in ``roles``, else of its fallback (cls/bos, sep/eos); None when neither is there."""
    return next((roles[name] for name in ROLE_FALLBACK[role] if name in roles), None)


REPLACEMENT_CHARACTER = "\ufffd"


def token_forms(tokenizer: PreTrainedTokenizerBase, normalize: Callable[[str], str]) -> dict[int, TokenForm]:
    """``{id: TokenForm}`` for every non-special entry that has text; added tokens are taken literally.

    An entry spelled with U+FFFD (text that was not valid UTF-8 where the vocabulary was built, such as
    GPT-2's ``.ï¿½``) has no text to match: BERT's normalizer would drop the character and match ``.``.
    """
    scheme = vocabulary_scheme(tokenizer)
    added = tokenizer.added_tokens_decoder
    skip = special_ids(tokenizer)
    forms = {}
    for token, index in tokenizer.get_vocab().items():
        if index in skip:
            continue
        parts = (token.strip(), True) if index in added else scheme.split(token)
        if not parts or not parts[0] or REPLACEMENT_CHARACTER in parts[0]:
            continue
        text = normalize(parts[0])
        if text:
            forms[index] = TokenForm(parts[0], text, parts[1])
    return forms


# ---------------------------------------------------------------------------- overlap


@dataclass
class VocabularyMatch:
    """Where each target row comes from."""

    special: dict[int, int] = field(default_factory=dict)
    exact: dict[int, int] = field(default_factory=dict)
    merged: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    new: list[int] = field(default_factory=list)

    @property
    def overlap(self) -> list[int]:
        """Target ids whose rows come from matching source tokens, sorted."""
        return sorted([*self.exact, *self.merged])


def merge_weights(target: TokenForm, candidates: list[tuple[int, TokenForm]]) -> list[tuple[int, float]]:
    """Normalized weights ``(2 if same position else 1) * (2 if same spelling else 1)`` of merged source rows."""
    raw = [
        (index, (SAME_POSITION_WEIGHT if form.word_start == target.word_start else 1.0)
         * (SAME_SPELLING_WEIGHT if form.spelling == target.spelling else 1.0))
        for index, form in candidates
    ]
    total = sum(weight for _, weight in raw)
    return [(index, weight / total) for index, weight in raw]


def same_letters_first(target: TokenForm, candidates: list[tuple[int, TokenForm]]) -> list[tuple[int, TokenForm]]:
    """The candidates spelled with the target's letters up to case, when there are any; else all of them.

    Accent folding makes ``s``, ``š`` and ``ş`` one text: a source row for ``š`` then only joins the
    target ``s`` when no source ``s``/``S`` exists (GPT-2 onto BERT-uncased: 118 of 8,724 blends lose
    such members, 41 of them become single copies).
    """
    same = [candidate for candidate in candidates if candidate[1].spelling.casefold() == target.spelling.casefold()]
    return same or candidates


def match_vocabularies(
    source_tokenizer: PreTrainedTokenizerBase, target_tokenizer: PreTrainedTokenizerBase
) -> VocabularyMatch:
    """Pair every target id with its source rows: special equivalents, exact copies, merges, or new.

    A target token's candidates are the source tokens with the same normalized text at the same
    position (word start / continuation), those with the same letters up to case first
    (:func:`same_letters_first`); unmarked source tokens also count as word starts when the source
    leaves a text's first word unmarked.
    """
    normalize = text_normalizer(target_tokenizer)
    scheme = vocabulary_scheme(source_tokenizer)
    by_text: dict[str, list[tuple[int, TokenForm]]] = defaultdict(list)
    for index, form in sorted(token_forms(source_tokenizer, normalize).items()):
        by_text[form.text].append((index, form))
    source_roles = special_roles(source_tokenizer)
    match = VocabularyMatch()
    for role, index in special_roles(target_tokenizer).items():
        source_index = role_id(source_roles, role)
        if source_index is not None:
            match.special.setdefault(index, source_index)
    target_forms = token_forms(target_tokenizer, normalize)
    for index in range(len(target_tokenizer)):
        if index in match.special:
            continue
        target_form = target_forms.get(index)
        if target_form is None:  # no text to match (a special token, a lone marker, a byte piece)
            match.new.append(index)
            continue
        candidates = same_letters_first(target_form, [
            (source, source_form) for source, source_form in by_text.get(target_form.text, [])
            if (scheme.can_start_word(source_form) if target_form.word_start else not source_form.word_start)
        ])
        if len(candidates) == 1:
            match.exact[index] = candidates[0][0]
        elif candidates:
            match.merged[index] = merge_weights(target_form, candidates)
        else:
            match.new.append(index)
    return match
