"""Rehearsals: a recipe run end to end at miniature size, before anyone spends a GPU-hour on it.

``train --recipe NAME --rehearse`` runs every stage and the training of the recipe as shipped, with three
changes, all printed: each model it names is a stand-in (:mod:`vtrepro.training.standin_models`), each data file
and dataset a miniature one in its published format (:mod:`vtrepro.data.standins`), and its steps, batch
sizes and lengths scaled down (:data:`SCALED`). Every reader, stage, loss and checkpoint the real run meets
runs; only sizes and weights differ. The run folder is written as a real one is, with ``rehearsal.json``
saying what was replaced; its model is never a result.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write, write_json
from vtrepro.core.schema import read_yaml, round_trip_yaml
from vtrepro.data.standins import (
    Collection,
    write_beir_folder,
    write_hard_negatives,
    write_pairs,
    write_teacher_scores,
    write_text_corpus,
    write_tsv,
)
from vtrepro.training.inputs import required_inputs
from vtrepro.training.recipe import DataOptions, PairsData, Recipe, find_recipe, load_recipe
from vtrepro.training.standin_models import write_standin_model

logger = logging.getLogger(__name__)

REHEARSAL_NAME = "rehearsal.json"
"""The file in a rehearsed run's folder that marks it as one and lists what was replaced."""
STANDINS_NAME = "standins"
"""The folder of a rehearsal's stand-in models (``models/``) and data (``data/``), beside its run folder."""
SCALED: dict[str, dict[str, int]] = {
    "training": {"steps": 2, "batch_size": 4, "max_length_query": 16, "max_length_doc": 32, "save_every": 2,
                 "lr_warmup_steps": 1},
    "loss": {"flops_warmup_steps": 1},
    "mlm": {"steps": 2, "batch_size": 4, "max_length": 32, "warmup_steps": 1},
    "calibrate": {"docs": 16, "max_length": 32, "batch_size": 8},
}
"""What a rehearsal sets, by recipe section or stage: the smallest sizes at which every code path still runs
(two training steps, so the checkpoint at step 2 is written and a resume is possible)."""
SPARSER: dict[str, dict[str, float]] = {"calibrate": {"cut_percent": 99.0}}
"""Values a rehearsal raises: APC's cut. The authors' cut 60 leaves 40% of the vocabulary active (about 12,000
terms a document) for 150,000 FLOPS-regularized steps to sparsify; two steps cannot, and indexing and searching
12,000-term vectors would be most of a rehearsal. At 99 a document keeps about 300 terms; the stage runs the same."""
SPLITS = ("test", "train", "dev")
"""The qrels splits of each stand-in BEIR dataset: every split a shipped spec or recipe reads."""
HELD_OUT = 2
"""Pairs held out for validation in a rehearsal (a recipe's ``data.held_out`` when smaller)."""
MSMARCO_SEED = "msmarco"
"""The one seed of every MS MARCO stand-in file, so their query and passage ids line up."""


@dataclass
class Rehearsal:
    """The folder of a rehearsal's stand-ins (made once, reused by every recipe and spec rehearsed into it) and
    what was replaced, in words."""

    root: Path
    substitutions: list[str] = field(default_factory=list)
    scaled: list[str] = field(default_factory=list)

    @property
    def model_dir(self) -> Path:
        return self.root / "models"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def model(self, name: str) -> None:
        """A stand-in for model ``name`` under :attr:`model_dir` (where ``resolve_model`` finds it by name)."""
        folder = self.model_dir / name
        if not folder.is_dir():
            folder.parent.mkdir(parents=True, exist_ok=True)
            self.note(write_standin_model(name, folder, self.root / "tokenizers").describe())
        else:
            self.note(f"model {name}: the stand-in in {folder}")

    def idf_table(self, name: str) -> None:
        """``idf.json`` beside the stand-in for model ``name``, as released inference-free models ship it: the
        IDF of its tokens over the MS MARCO stand-in collection."""
        from transformers import AutoTokenizer

        from vtrepro.model.idf import IDF_NAME, IdfQueryEncoder

        folder = self.model_dir / name
        if not (folder / IDF_NAME).is_file():
            texts = Collection.make(MSMARCO_SEED).documents.values()
            IdfQueryEncoder.from_corpus(AutoTokenizer.from_pretrained(folder), texts).save(folder)
        self.note(f"model {name}: {IDF_NAME} from the stand-in collection's document frequencies")

    def dataset(self, name: str) -> None:
        """A stand-in BEIR folder for dataset ``name`` under :attr:`data_dir` (``beir/<name>``)."""
        folder = self.data_dir / "beir" / name
        if not folder.is_dir():
            write_beir_folder(folder, name, SPLITS)
        self.note(f"dataset {name}: a BEIR folder of {len(Collection.make(name).documents)} documents "
                   f"({', '.join(SPLITS)} qrels)")

    def file(self, label: str, value: str, data: DataOptions | None = None) -> None:
        """A stand-in for the data file ``value`` (relative to the data root) that recipe key ``label`` names,
        in that file's published format, under :attr:`data_dir`; ``data``: the recipe's data block, for its files."""
        if Path(value).is_absolute() or ".." in Path(value).parts:
            raise VtreproError(f"{label} {value}: a rehearsal stands in for data files named relative to "
                               "--data-dir only")
        path = self.data_dir / value  # never the working directory's file of that name
        path.parent.mkdir(parents=True, exist_ok=True)
        msmarco = Collection.make(MSMARCO_SEED)
        if label == "data.hard_negatives":
            write_hard_negatives(path, msmarco, MSMARCO_SEED)
        elif label == "data.queries":
            write_tsv(path, msmarco.queries)
        elif label == "data.teacher":
            write_teacher_scores(path, msmarco)
        elif label == "data.collection" or path.name.endswith(".tsv"):
            write_tsv(path, msmarco.documents)
        elif label == "data.path" and isinstance(data, PairsData):
            write_pairs(path, msmarco, data.query_field, data.document_field)
        elif label == "data.path":
            raise VtreproError(f"data.path {value}: a rehearsal has no stand-in for {data.format if data else 'such'} files; "
                               "rehearse a recipe with beir, msmarco or pairs data")
        else:
            write_text_corpus(path, msmarco)
        self.note(f"{label} {value}: a miniature file in its published format ({path})")

    def note(self, text: str) -> None:
        """Record a substitution once (printed and written to ``rehearsal.json``)."""
        if text not in self.substitutions:
            self.substitutions.append(text)


def scale_down(node: CommentedMap, values: dict[str, int], where: str, notes: list[str],
               raised: dict[str, float] | None = None) -> None:
    """Lower each of ``values`` in ``node`` (added where the default is larger) and raise each of ``raised``
    that ``node`` sets; every change noted."""
    for key, value in (raised or {}).items():
        old = node.get(key)
        if isinstance(old, (int, float)) and old < value:
            node[key] = value
            notes.append(f"{where}.{key} {old} -> {value}")
    for key, value in values.items():
        old = node.get(key)
        if isinstance(old, int) and old <= value:
            continue
        node[key] = value
        notes.append(f"{where}.{key} {'(default)' if old is None else old} -> {value}")


def rehearsal_recipe(recipe: str | Path, rehearsal: Rehearsal) -> Recipe:
    """The recipe ``recipe`` (a file or a shipped name) scaled down, with stand-ins for everything it reads,
    written to ``<root>/recipes/`` under its own name and loaded (so validated) as any recipe is."""
    path = find_recipe(str(recipe))
    document = read_yaml(path)
    load_recipe(path)  # the recipe as shipped must be valid first: a rehearsal never hides a recipe's own error
    notes: list[str] = []
    for section in ("training", "loss"):
        document.setdefault(section, CommentedMap())
        scale_down(document[section], SCALED[section], section, notes)
    for index, node in enumerate(document.get("stages") or []):
        name = next(iter(node))
        if name in SCALED:
            scale_down(node[name], SCALED[name], f"stages[{index}].{name}", notes, SPARSER.get(name))
    data = document["data"]
    if data.get("format") == "beir":
        scale_down(data, {"depth": 5}, "data", notes)
    made = None  # the stand-in made here for a Hub dataset, not again below
    if data.get("hub"):
        local = rehearsal.data_dir / "hub" / f"{str(data['hub']).replace('/', '__')}.jsonl"
        made = str(local)
        rehearsal.note(f"data.hub {data['hub']}: its rows as a local JSONL file in the Hub dataset's columns ({local})")
        data["path"], data["hub"] = str(local), None
        local.parent.mkdir(parents=True, exist_ok=True)
        write_pairs(local, Collection.make(MSMARCO_SEED), data.get("query_field", "query"),
                    data.get("document_field", "positive"))
    if data.get("format") == "pairs":
        data["held_out"] = min(int(data.get("held_out") or 0), HELD_OUT)
        data["max_examples"] = None
    scaled_path = rehearsal.root / "recipes" / path.name
    scaled_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(scaled_path) as handle:
        handle.write(f"# REHEARSAL of {path}: scaled down, stand-in models and data (vtrepro train --rehearse)\n")
        round_trip_yaml().dump(document, handle)
    scaled = load_recipe(scaled_path)
    for label, kind, value in required_inputs(scaled, rehearsal.root / "nothing-trained"):
        if kind == "model":
            rehearsal.model(value)
        elif kind == "dataset" and not Path(value).suffix:
            rehearsal.dataset(value)
        elif value == made:
            continue
        elif kind in ("file", "dataset"):
            rehearsal.file(label, value, scaled.data)
        else:
            raise VtreproError(f"{path}: {label} {value}: a rehearsal has no stand-in for a {kind}")
    rehearsal.scaled += [f"{path.stem}: {note}" for note in notes]
    return scaled


def write_rehearsal_record(output: Path, rehearsal: Rehearsal, cost: list[str]) -> Path:
    """``rehearsal.json`` in a rehearsed run's folder: what was replaced, what was scaled, the real run's cost."""
    record = {"rehearsal": True, "standins": str(rehearsal.root), "substitutions": rehearsal.substitutions,
              "scaled": rehearsal.scaled, "real_run_cost": cost}
    write_json(output / REHEARSAL_NAME, record)
    return output / REHEARSAL_NAME


def describe_rehearsal(rehearsal: Rehearsal, cost: list[str]) -> str:
    """The rehearsal's substitutions and scale factors, and what the real run would cost, as printed lines."""
    lines = ["REHEARSAL: stand-in models and data, sizes scaled down; no figure of it is a result"]
    lines += [f"  stand-in {text}" for text in rehearsal.substitutions]
    lines += [f"  scaled {text}" for text in rehearsal.scaled]
    lines += ["the real run:", *(f"  {line}" for line in cost)]
    return "\n".join(lines)
