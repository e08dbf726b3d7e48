"""The vocabulary census: how many surface forms each unit has, and the variant classes kept apart by kind
(docs/vocabulary-gap.md, "Census").

The variant classes follow the one published count found (irhum/captoken's GPT-2 notebook, whose 4,710, 4,385 and
2,355 for GPT-2 this census gives): every entry ``e`` that does not begin with the position mark (nor, for CLIP,
end with it) and equals its own lowercase is a base, and a class
counts the bases whose variant is also an entry: ``marked`` (``Ġe``), ``marked_capitalized`` (``Ġ`` + ``e`` with
its first character uppercased, as it is: a digit stays a digit, so such a base counts again) and ``capitalized``
(``e`` with an alphabetic first character uppercased). WordPiece marks continuations, not word starts: its classes
are ``position_twins`` (``x`` and ``##x`` both entries) and ``capitalized``; ``marked`` and ``marked_capitalized``
are null there. ``case_variants`` counts the entries, letters only, that are another entry of the same position
in other case (``Apple`` beside ``apple``): the distinct case variants, whatever their first character.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from vtrepro.gap.units import WORDPIECE
from vtrepro.gap.vocabularies import Vocabulary

HISTOGRAM_BINS = ("1", "2", "3", "4", "5+")
TOP_GROUPS = 20


@dataclass(frozen=True)
class UnitGroups:
    """The non-special entries of a vocabulary grouped by unit (and, second level, by unit without accents)."""

    by_unit: dict[str, list[int]]
    by_unit_without_accents: dict[str, list[int]]

    def multi_form_units(self) -> set[str]:
        return {unit for unit, ids in self.by_unit.items() if len(ids) > 1}


def unit_groups(vocabulary: Vocabulary) -> UnitGroups:
    by_unit: dict[str, list[int]] = defaultdict(list)
    by_plain: dict[str, list[int]] = defaultdict(list)
    for index, form in enumerate(vocabulary.forms):
        if index not in vocabulary.specials:
            by_unit[form.unit].append(index)
            by_plain[form.unit_without_accents].append(index)
    return UnitGroups(dict(by_unit), dict(by_plain))


def variant_classes(vocabulary: Vocabulary) -> dict[str, int | None]:
    """The variant classes of the module's docstring, counted over the vocabulary's entries as written."""
    entries = set(vocabulary.entries)
    scheme = vocabulary.scheme
    wordpiece = scheme is WORDPIECE
    unmarked = wordpiece or scheme.marks == "none"  # no word-start mark to count
    counts: dict[str, int | None] = {"marked": None if unmarked else 0,
                                     "marked_capitalized": None if unmarked else 0, "capitalized": 0}
    if wordpiece:
        counts["position_twins"] = 0
    for entry in entries:
        if not entry or scheme.carries_marker(entry) or entry.lower() != entry:
            continue
        capital = entry[0].upper() + entry[1:]
        if wordpiece:
            counts["position_twins"] += scheme.mark(entry) in entries  # type: ignore[operator]
        elif not unmarked:
            counts["marked"] += scheme.mark(entry) in entries  # type: ignore[operator]
            counts["marked_capitalized"] += scheme.mark(capital) in entries  # type: ignore[operator]
        counts["capitalized"] += entry[0].isalpha() and capital in entries  # type: ignore[operator]
    counts["case_variants"] = _case_variants(vocabulary)
    return counts


def _case_variants(vocabulary: Vocabulary) -> int:
    """Entries (letters only, not special) that another entry of the same position spells in other case."""
    lowered: dict[tuple[bool, str], set[str]] = defaultdict(set)
    for index, form in enumerate(vocabulary.forms):
        if index not in vocabulary.specials and form.text.isalpha():
            lowered[(form.marked, form.unit)].add(form.text)
    return sum(len(texts) - 1 for texts in lowered.values() if len(texts) > 1)


def census(vocabulary: Vocabulary) -> dict:
    """The census of one vocabulary, as written into ``census.json``."""
    groups = unit_groups(vocabulary)
    counted = len(vocabulary.entries) - len(vocabulary.specials)
    histogram = dict.fromkeys(HISTOGRAM_BINS, 0)
    for ids in groups.by_unit.values():
        histogram[HISTOGRAM_BINS[min(len(ids), 5) - 1]] += 1
    in_groups = sum(len(ids) for ids in groups.by_unit.values() if len(ids) > 1)
    largest = sorted(groups.by_unit.items(), key=lambda item: (-len(item[1]), item[0]))[:TOP_GROUPS]
    return {
        "name": vocabulary.name,
        "source": vocabulary.source,
        "scheme": vocabulary.scheme.name,
        "entries": len(vocabulary.entries),
        "specials": len(vocabulary.specials),
        "units": len(groups.by_unit),
        "units_without_accents": len(groups.by_unit_without_accents),
        "coarse_graining": round(counted / len(groups.by_unit), 4) if groups.by_unit else None,
        "coarse_graining_without_accents": (round(counted / len(groups.by_unit_without_accents), 4)
                                            if groups.by_unit_without_accents else None),
        "forms_per_unit": histogram,
        "multi_form_share": round(in_groups / counted, 4) if counted else 0.0,
        "largest_groups": [{"unit": unit, "forms": [vocabulary.entries[index] for index in ids]}
                           for unit, ids in largest],
        "variants": variant_classes(vocabulary),
    }
