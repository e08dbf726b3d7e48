"""Whether merging a unit's forms keeps their meaning (docs/vocabulary-gap.md, "Semantic integrity").

For every unit of several forms, each form seen at least :data:`MIN_OCCURRENCES` times in the documents, each
form's context is the distribution of the units within :data:`WINDOW` tokens of it. A form's divergence is the
Jensen-Shannon divergence (bits, 0 to 1) between its context and that of the group's commonest form; a group's is
its largest. The baseline is the same divergence between the commonest forms of :data:`RANDOM_PAIRS` pairs of
different units drawn with a fixed seed from the units measured: a merge whose divergence reaches the baseline's
median joins forms used as differently as two unrelated words (``US``/``us``, ``May``/``may``). With a model, the
cosine of each form's input-embedding row with the commonest form's is set beside the same random pairs' cosine.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from vtrepro.core.errors import VtreproError
from vtrepro.gap.census import unit_groups
from vtrepro.gap.corpus import TokenizedDataset
from vtrepro.gap.vocabularies import Vocabulary

MIN_OCCURRENCES = 50
WINDOW = 2
RANDOM_PAIRS = 500
SEED = 0
LISTED = 15


def _contexts(tokenized: TokenizedDataset, wanted: set[int], units: np.ndarray) -> dict[int, Counter]:
    """For each wanted id, the counts of the units within WINDOW positions of its occurrences (never across two
    documents: WINDOW separators stand between them)."""
    separator = np.full(WINDOW, -1, dtype=np.int64)
    pieces = [piece for ids in tokenized.documents.values() for piece in (np.asarray(ids, dtype=np.int64), separator)]
    tokens = np.concatenate(pieces) if pieces else separator
    lookup = np.zeros(len(units) + 1, dtype=bool)  # the last place answers for the separator (-1)
    lookup[list(wanted)] = True
    unit_of = np.append(units, -1)
    keys = []
    for offset in range(1, WINDOW + 1):
        for centre, neighbour in ((tokens[:-offset], tokens[offset:]), (tokens[offset:], tokens[:-offset])):
            keep = lookup[centre] & (unit_of[neighbour] >= 0)  # no separator, no special
            keys.append(centre[keep] * (len(units) + 1) + unit_of[neighbour[keep]])
    found, counts = np.unique(np.concatenate(keys), return_counts=True)
    contexts: dict[int, Counter] = defaultdict(Counter)
    for key, count in zip(found.tolist(), counts.tolist()):
        contexts[key // (len(units) + 1)][key % (len(units) + 1)] = count
    return contexts


def _divergence(first: Counter, second: Counter) -> float:
    """Jensen-Shannon divergence of two count distributions, in bits."""
    first_total, second_total = sum(first.values()), sum(second.values())
    total = 0.0
    for key in first.keys() | second.keys():
        p, q = first.get(key, 0) / first_total, second.get(key, 0) / second_total
        m = (p + q) / 2
        total += (p * math.log2(p / m) if p else 0.0) + (q * math.log2(q / m) if q else 0.0)
    return total / 2


def integrity(tokenized: TokenizedDataset, embeddings: np.ndarray | None = None) -> dict:
    """The divergence of every merged group measured on ``tokenized``'s documents, the random-pair baseline, the
    groups most at risk and the best preserved; with ``embeddings`` (rows by vocabulary id) their cosines too."""
    vocabulary = tokenized.vocabulary
    groups = unit_groups(vocabulary)
    unit_number = {unit: number for number, unit in enumerate(sorted(groups.by_unit))}
    units = np.array([unit_number.get(form.unit, -1) for form in vocabulary.forms], dtype=np.int64)
    counts = Counter(index for ids in tokenized.documents.values() for index in ids)
    measured = {unit: sorted((index for index in ids if counts[index] >= MIN_OCCURRENCES),
                             key=lambda index: (-counts[index], index))
                for unit, ids in groups.by_unit.items()}
    merged = {unit: ids for unit, ids in measured.items() if len(ids) > 1}
    singles = sorted(unit for unit, ids in measured.items() if ids)
    rng = np.random.default_rng(SEED)
    pairs = [tuple(rng.choice(len(singles), size=2, replace=False)) for _ in range(RANDOM_PAIRS)] if len(singles) > 1 else []
    random_heads = [(measured[singles[a]][0], measured[singles[b]][0]) for a, b in pairs]
    wanted = {index for ids in merged.values() for index in ids} | {index for pair in random_heads for index in pair}
    contexts = _contexts(tokenized, wanted, units)
    rows: list[dict[str, Any]] = []
    for unit, ids in merged.items():
        head = ids[0]
        divergences = [_divergence(contexts[index], contexts[head]) for index in ids[1:]]
        row: dict[str, Any] = {"unit": unit, "forms": [vocabulary.entries[index] for index in ids],
               "occurrences": [counts[index] for index in ids], "divergence": round(max(divergences), 4)}
        if embeddings is not None:
            row["cosine"] = round(min(_cosine(embeddings, index, head) for index in ids[1:]), 4)
        rows.append(row)
    baseline = [_divergence(contexts[a], contexts[b]) for a, b in random_heads]
    weight = sum(sum(row["occurrences"]) for row in rows)
    ranked = sorted(rows, key=lambda row: (-row["divergence"], row["unit"]))
    median = float(np.median(baseline)) if baseline else None
    figures = {
        "tokenizer": vocabulary.name, "dataset": tokenized.dataset,
        "groups_measured": len(rows),
        "mean_divergence": round(sum(row["divergence"] * sum(row["occurrences"]) for row in rows) / weight, 4)
        if weight else None,
        "random_pair_divergence": round(median, 4) if median is not None else None,
        "groups_at_baseline": sum(row["divergence"] >= median for row in rows) if median is not None else None,
        "at_risk": ranked[:LISTED],
        "preserved": ranked[::-1][:LISTED],
    }
    if embeddings is not None:
        figures["random_pair_cosine"] = round(float(np.median([_cosine(embeddings, a, b) for a, b in random_heads])), 4) \
            if random_heads else None
        figures["mean_cosine"] = round(float(np.mean([row["cosine"] for row in rows])), 4) if rows else None
    return figures


def _cosine(embeddings: np.ndarray, first: int, second: int) -> float:
    a, b = embeddings[first], embeddings[second]
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norm if norm else 0.0


def input_embeddings(model: str, vocabulary: Vocabulary, model_dir: str | None = None) -> np.ndarray:
    """The input-embedding rows of ``model`` (read as every model is: :func:`vtrepro.model.loading.load_masked_lm`),
    by ``vocabulary``'s ids; the model's tokenizer must spell every id as the vocabulary does."""
    from vtrepro.model.loading import load_masked_lm

    loaded, tokenizer = load_masked_lm(model, model_dir)
    rows = loaded.get_input_embeddings().weight.detach().float().numpy()  # type: ignore[operator]
    size = len(vocabulary.entries)
    spelled = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
    differs = next((index for index, entry in enumerate(vocabulary.entries)
                    if index >= len(spelled) or spelled[index] != entry), None)
    if differs is not None or rows.shape[0] < size:
        at = differs if differs is not None else rows.shape[0]
        raise VtreproError(f"--model {model}: its tokenizer does not spell the vocabulary of --tokenizer "
                           f"{vocabulary.name} (id {at}: {spelled[at] if at < len(spelled) else 'missing'!r} against "
                           f"{vocabulary.entries[at] if at < size else 'missing'!r}); give the tokenizer of that model")
    return rows[:size]
