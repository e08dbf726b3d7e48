"""``regress --rehearse``: a spec run end to end at miniature size on stand-ins, before a GPU-hour is spent.

Every condition and dataset of the spec runs through every stage the real run does (training recipes,
vocabulary transfer and calibration, encoding, Lucene indexing, search, evaluation, the report), with the
stand-ins of :mod:`vtrepro.training.rehearsal`: models replaced by random-weight ones of their family,
datasets by miniature BEIR folders, recipes and encoder lengths scaled down. The spec is rewritten with
every pin and published reference removed, so nothing is compared: the report is marked REHEARSAL.
A condition whose model is a training run's folder (``runs/train/<recipe>/final``) of a shipped recipe
rehearses that recipe first and uses its model.
"""
from __future__ import annotations

from pathlib import Path

from ruamel.yaml.comments import CommentedMap

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import atomic_write
from vtrepro.core.schema import read_yaml, round_trip_yaml
from vtrepro.gap.vocabularies import BUILT_IN
from vtrepro.model.hub import looks_like_path
from vtrepro.regress.cost import recipe_of_trained_folder
from vtrepro.regress.spec import Spec
from vtrepro.training.rehearsal import SCALED, SPARSER, Rehearsal, rehearsal_recipe, scale_down

REHEARSAL_ENCODER = {"max_length_doc": 32, "max_length_query": 16, "batch_size": 8, "projection": "dense"}
"""A rehearsal's encoder lengths and batch size (the scaled recipes' training lengths), and the dense vocabulary
projection a GPU run takes (``auto`` picks it on a GPU; on a CPU with int8 instructions it screens, whose set-up
costs more than a 32-document stand-in corpus)."""
PINS = ("scores", "reference", "index", "vectors", "gap")
"""Dataset keys a rehearsal drops: nothing it computes is compared with a recorded or published figure."""
CONDITION_REFERENCES = ("published", "reference_source", "reference_tolerance", "reference_average")
"""Condition keys a rehearsal drops, for the same reason."""


def _stand_in_models(spec: Spec, rehearsal: Rehearsal) -> None:
    for condition in spec.conditions:
        names: list[str | None] = [condition.model] if condition.model and not condition.train else []
        for stage in condition.stages:
            options = stage.options.to_dict()
            names += [options.get("target_tokenizer"), options.get("reference")]
            if options.get("dataset"):
                rehearsal.dataset(options["dataset"])
            elif options.get("corpus"):
                rehearsal.file(f"condition '{condition.name}' calibrate corpus", options["corpus"])
        for name in filter(None, names):
            if recipe_of_trained_folder(name) is None:
                rehearsal.model(name)
        if condition.query_encoder == "idf" and condition.model and not condition.train:
            rehearsal.idf_table(condition.model)


def _rehearse_gap(spec: Spec, document: CommentedMap, rehearsal: Rehearsal) -> None:
    """The gap study on stand-in datasets, its tokenizers as they are (built-in vocabularies are files of installed
    packages; a model's tokenizer is its stand-in's), its pins removed."""
    assert spec.gap is not None
    document["gap"].pop("pins", None)
    for name in spec.gap.datasets:
        rehearsal.dataset(name)
    for name in dict.fromkeys([*spec.gap.tokenizers, *spec.gap.corpus_tokenizers]):
        if name not in BUILT_IN:
            rehearsal.model(name)


def rehearsal_spec(spec: Spec, rehearsal: Rehearsal) -> Path:
    """``spec`` rewritten for a rehearsal (its recipes scaled, its models and datasets stood in for, its pins
    and references removed), written to ``<root>/specs/`` under its own name; its path."""
    document = read_yaml(spec.path)
    document["description"] = f"REHEARSAL (stand-in models and data, scaled down) of: {spec.description}"
    for condition in spec.conditions:
        node = document["conditions"][condition.name]
        model = condition.model if not condition.stages else None
        recipe = condition.train or (recipe_of_trained_folder(model) if model else None)
        if model and recipe and not condition.train:
            rehearsal.note(f"condition '{condition.name}': model {model} is trained by rehearsing recipe {recipe}")
            del node["model"]
        if recipe:
            node["train"] = str(rehearsal_recipe(recipe, rehearsal).path)
        elif model and looks_like_path(model):
            raise VtreproError(f"{spec.path}: condition '{condition.name}': model {model} is a folder, which a "
                               "rehearsal cannot stand in for (it stands in for Hub models, and for runs/train/<recipe>/"
                               "final of a shipped recipe)")
        encoder = node.get("encoder")
        if condition.retrieval == "impact":
            node["encoder"] = CommentedMap({**(encoder or {}), **REHEARSAL_ENCODER})
        if isinstance(node.get("calibrate"), CommentedMap):
            scale_down(node["calibrate"], SCALED["calibrate"], f"{condition.name}.calibrate", rehearsal.scaled,
                       SPARSER["calibrate"])
        for key in CONDITION_REFERENCES:
            node.pop(key, None)
        datasets = node["datasets"]
        for name in list(datasets):
            entry = datasets[name] if isinstance(datasets[name], CommentedMap) else CommentedMap()
            datasets[name] = CommentedMap({key: value for key, value in entry.items() if key not in PINS}) or None
            rehearsal.dataset(name)
    _stand_in_models(spec, rehearsal)
    if spec.gap is not None:
        _rehearse_gap(spec, document, rehearsal)
    encoder = ", ".join(f"{key} {value}" for key, value in REHEARSAL_ENCODER.items())
    rehearsal.scaled.append(f"{spec.name}: every impact condition's encoder: {encoder}; pins and published "
                            "references removed")
    path = rehearsal.root / "specs" / spec.path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as handle:
        handle.write(f"# REHEARSAL of {spec.path} (vtrepro regress --rehearse): never compared with any pin\n")
        round_trip_yaml().dump(document, handle)
    return path
