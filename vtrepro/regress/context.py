"""What a regression run was asked to do, fixed once its command line is parsed.

:func:`vtrepro.regress.command.main` builds one :class:`RunContext` from its arguments; everything below
it (:func:`~vtrepro.regress.runner.run_all`, :class:`~vtrepro.regress.conditions.ConditionRunner`)
reads this frozen record instead of the parser's namespace, so the run core can be driven without a
command line and no stage can change what a later one sees.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vtrepro.core.cli import DEFAULT_THREADS

BUNDLE_CACHE = ".bundles"
"""Under the output root: the bundles given to ``--vectors`` and ``--reference-vectors``, extracted once."""
TRAIN_ROOT = "train"
"""Under the output root: the models of conditions that name a training recipe, one folder per recipe."""


@dataclass(frozen=True)
class RunContext:
    """The settings of one regression run.

    ``output`` is the root every artifact goes under (the run's folder is ``<output>/<spec name>``);
    ``model_dir`` and ``data_dir`` are where models and datasets are looked up (None: the defaults of
    :mod:`vtrepro.model.loading` and :mod:`vtrepro.data.beir`); ``threads`` are the indexing and search threads and
    ``encode_processes`` the local processes that encode a corpus. ``vectors`` and ``reference_vectors``
    are the vector sources given in place of encoding and to compare with; ``record`` writes the observed
    values into the spec, ``strict`` counts OKISH as FAIL, and ``trust_remote_code`` is the grant to run
    model code that a spec or recipe asks for. ``command`` is the command line, kept in the report.
    """

    output: Path
    model_dir: str | None = None
    data_dir: str | None = None
    threads: int = DEFAULT_THREADS
    encode_processes: int = 1
    vectors: Path | None = None
    reference_vectors: Path | None = None
    record: bool = False
    strict: bool = False
    trust_remote_code: bool = False
    command: tuple[str, ...] = ()
    datasets: str | None = None  # --datasets: the comma-separated subset of the spec's datasets to run

    @property
    def train_root(self) -> Path:
        """Where the models of ``train`` recipes are trained: ``<output>/train/<recipe>/``."""
        return self.output / TRAIN_ROOT

    @property
    def bundle_cache(self) -> Path:
        """Where vector bundles are extracted: ``<output>/.bundles/``."""
        return self.output / BUNDLE_CACHE
