"""Models for sentence-transformers: a masked-LM SPLADE folder as one ``sentence_transformers.SparseEncoder(folder)``
loads as it is, with no code of vtrepro's.

The folder is written file by file in the layout sentence-transformers 6 saves (``SparseEncoder.save``): the
masked LM and its tokenizer at the root (safetensors only), ``sentence_bert_config.json`` for its
``Transformer`` module (task ``fill-mask``, logits out), ``1_SpladePooling/config.json`` (max pooling, ``relu``
activation: ``log(1 + relu(logits))`` as :class:`vtrepro.model.splade.SpladeEncoder` computes it),
``modules.json`` and ``config_sentence_transformers.json`` (dot product). The lengths vtrepro encodes with
are written where sentence-transformers reads them: ``document_length`` and ``query_length`` (used by
``encode_document`` and ``encode_query``) and the tokenizer's ``model_max_length`` (plain ``encode``) set to
the document length.

An inference-free model (queries weighted by IDF, :mod:`vtrepro.model.idf`) becomes a ``Router``: its query
route a ``SparseStaticEmbedding`` holding vtrepro's IDF weights (tokenizer truncating at the query length,
no special tokens), its document route the SPLADE modules above in ``document_0_Transformer/`` and
``document_1_SpladePooling/``. ``idf.json`` ({token: idf}) lies at the root, where OpenSearch's inference-free
models keep it, and in ``document_0_Transformer/``, which is then a complete vtrepro inference-free model folder.

sentence-transformers returns float weights over the whole output vocabulary: vtrepro's vectors are those
weights without the special tokens' dimensions (and the padding rows some vocabulary matrices add),
quantized (:class:`vtrepro.encode.vectors.Quantization`), with terms escaped; the model card says how.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from vtrepro.core.checkpoints import check_out, staged_folder
from vtrepro.core.errors import VtreproError
from vtrepro.core.io import JSON_FILE_BYTES, atomic_write, read_json_file, write_json
from vtrepro.core.log import quiet_transformers
from vtrepro.model.encoder_options import EncoderOptions
from vtrepro.model.folder_checks import check_model_file
from vtrepro.model.identity import model_fingerprint
from vtrepro.model.idf import IdfQueryEncoder
from vtrepro.model.loading import load_masked_lm, resolve_model

FORMAT_VERSION = "6.3.0"
POOLING_ACTIVATION = {"log1p": "relu", "log1p-log1p": "log1p_relu"}
"""vtrepro's ``activation`` -> SpladePooling's ``activation_function`` (which applies log1p after it, and
with ``log1p_relu`` once more: OpenSearch's v3 activation)."""
ACTIVATION_TEXT = {"log1p": "log1p(relu(logits)), max over tokens",
                   "log1p-log1p": "log1p(log1p(relu(logits))), max over tokens"}
"""The sentence-transformers release whose ``save()`` layout is written (checked against it by the tests)."""
TRANSFORMER_TYPE = "sentence_transformers.base.modules.transformer.Transformer"
POOLING_TYPE = "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"
STATIC_TYPE = "sentence_transformers.sparse_encoder.modules.sparse_static_embedding.SparseStaticEmbedding"
ROUTER_TYPE = "sentence_transformers.base.modules.router.Router"
QUERY_FOLDER, DOCUMENT_FOLDER, POOLING_FOLDER = ("query_0_SparseStaticEmbedding", "document_0_Transformer",
                                                 "document_1_SpladePooling")
EXPORT_RECORD = "vtrepro_export.json"
"""What the folder was made from and how vtrepro quantizes its output, beside the model card."""
REPORT_NAMES = ("transfer_report.json", "mlm_report.json", "calibration_report.json", "training_report.json")
"""vtrepro's reports in a model folder (transfer, MLM, calibration, training), copied with the model: opened by
these names only, each a regular file inside the folder (another ``*_report.json`` is never read)."""


@dataclass(frozen=True)
class ExportedModel:
    """What :func:`write_sparse_encoder` wrote, handed to the model card before the folder is complete."""

    source: str
    fingerprint: str
    """:func:`vtrepro.model.identity.model_fingerprint` of the weights written."""
    architecture: str
    vocabulary_size: int
    """Dimensions of sentence-transformers' output (the MLM decoder's rows)."""
    special_ids: tuple[int, ...]
    """Output dimensions vtrepro drops: special tokens and rows beyond the tokenizer."""
    options: EncoderOptions
    inference_free: bool
    reports: dict[str, dict[str, Any]]
    """vtrepro's reports found in the model folder, by file name."""

    @property
    def model_folder(self) -> str:
        """Where the masked LM lies in the exported folder ('' for the root)."""
        return DOCUMENT_FOLDER if self.inference_free else ""

    def record(self) -> dict[str, Any]:
        """The JSON of :data:`EXPORT_RECORD`."""
        return {"source": self.source, "fingerprint": self.fingerprint, "architecture": self.architecture,
                "vocabulary_size": self.vocabulary_size, "dropped_dimensions": list(self.special_ids),
                "max_length_doc": self.options.max_length_doc, "max_length_query": self.options.max_length_query,
                "inference_free": self.inference_free, "model_folder": self.model_folder,
                "activation": ACTIVATION_TEXT[self.options.activation], "format": f"sentence-transformers {FORMAT_VERSION}"}


def write_sparse_encoder(model: str | Path, output: str | Path, options: EncoderOptions = EncoderOptions(), *,
                         idf: dict[str, float] | None = None, card: Callable[[ExportedModel], str] | None = None,
                         model_dir: str | Path | None = None, trust_remote_code: bool = False) -> ExportedModel:
    """Write ``model`` (a masked-LM folder or Hub id) to the new or empty folder ``output`` as a
    sentence-transformers ``SparseEncoder``; with ``idf`` ({token: idf}) as an inference-free one.

    ``options`` give the lengths written; ``card(exported)`` the ``README.md``. The folder is staged beside
    ``output`` and renamed into place, so a failure leaves nothing behind.
    """
    output = check_out(output)
    network, tokenizer = load_masked_lm(model, model_dir, trust_remote_code)
    query_side = IdfQueryEncoder(tokenizer, idf, options.max_length_query) if idf is not None else None
    decoder = network.get_output_embeddings()
    exported = ExportedModel(
        source=str(model), fingerprint=model_fingerprint(network), architecture=type(network).__name__,
        vocabulary_size=decoder.out_features, options=options, inference_free=query_side is not None,
        special_ids=tuple(sorted(set(tokenizer.all_special_ids) | set(range(len(tokenizer), decoder.out_features)))),
        reports=_reports(model, model_dir))
    with staged_folder(output) as staging:
        transformer = staging / exported.model_folder
        _write_transformer(transformer, network, tokenizer, exported)
        if query_side is None:
            _write_pooling(staging / "1_SpladePooling", exported.vocabulary_size, options.activation)
            write_json(staging / "modules.json", [_module(0, "", TRANSFORMER_TYPE), _module(1, "1_SpladePooling", POOLING_TYPE)])
        else:
            _write_query_side(staging, query_side, tokenizer)
            query_side.save(transformer)
            _write_pooling(staging / POOLING_FOLDER, exported.vocabulary_size, options.activation)
            write_json(staging / "modules.json", [_module(0, "", ROUTER_TYPE)])
            write_json(staging / "router_config.json", _router_config())
        write_json(staging / "config_sentence_transformers.json", _model_config())
        write_json(staging / EXPORT_RECORD, exported.record())
        if card is not None:
            with atomic_write(staging / "README.md") as handle:
                handle.write(card(exported))
    return exported


def _reports(model: str | Path, model_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """vtrepro's ``*_report.json`` files in a local model folder (none for a Hub id)."""
    folder = Path(resolve_model(model, model_dir))
    reports: dict[str, dict[str, Any]] = {}
    for name in REPORT_NAMES if folder.is_dir() else ():
        if check_model_file(folder, name):
            report = read_json_file(folder / name, "the report is truncated or corrupt: restore it or remove it from "
                                    "the model folder", JSON_FILE_BYTES["model"], folder)
            reports[name] = report if isinstance(report, dict) else {"value": report}
    return reports


def _write_transformer(folder: Path, network: Any, tokenizer: Any, exported: ExportedModel) -> None:
    """The masked LM (safetensors), its tokenizer truncating at the document length, the module config and
    vtrepro's reports."""
    options = exported.options
    with quiet_transformers():
        network.save_pretrained(folder, safe_serialization=True)
    tokenizer.model_max_length = options.max_length_doc
    tokenizer.save_pretrained(folder)
    write_json(folder / "sentence_bert_config.json", {
        "transformer_task": "fill-mask",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
        "module_output_name": "token_embeddings",
        "query_length": options.max_length_query,
        "document_length": options.max_length_doc,
    })
    for name, report in exported.reports.items():
        write_json(folder / name, report)


def _write_pooling(folder: Path, dimensions: int, activation: str) -> None:
    write_json(folder / "config.json", {"pooling_strategy": "max", "activation_function": POOLING_ACTIVATION[activation],
                                        "embedding_dimension": dimensions})


def _write_query_side(root: Path, query_side: IdfQueryEncoder, tokenizer: Any) -> None:
    """The ``SparseStaticEmbedding`` query route: IDF weights (float32, one per tokenizer entry, as it loads
    them), its tokenizer truncating at the query length; and ``idf.json`` at the root."""
    import torch
    from safetensors.torch import save_file

    entries = len(tokenizer.get_vocab())
    if entries != len(query_side.weights):
        raise VtreproError(f"tokenizer of {tokenizer.name_or_path}: {entries} vocabulary entries but {len(query_side.weights)} "
                           "token ids; sentence-transformers' SparseStaticEmbedding needs one weight per entry")
    folder = root / QUERY_FOLDER
    folder.mkdir()
    save_file({"weight": torch.from_numpy(query_side.weights.copy())}, str(folder / "model.safetensors"))
    tokenizer.model_max_length = query_side.max_length_query
    tokenizer.save_pretrained(folder)
    write_json(folder / "config.json", {"frozen": True})
    query_side.save(root)


def _module(index: int, path: str, kind: str) -> dict[str, Any]:
    return {"idx": index, "name": str(index), "path": path, "type": kind}


def _router_config() -> dict[str, Any]:
    return {
        "types": {QUERY_FOLDER: STATIC_TYPE, DOCUMENT_FOLDER: TRANSFORMER_TYPE, POOLING_FOLDER: POOLING_TYPE},
        "structure": {"query": [QUERY_FOLDER], "document": [DOCUMENT_FOLDER, POOLING_FOLDER]},
        "parameters": {"default_route": "document", "allow_empty_key": True, "route_mappings": {}},
    }


def _model_config() -> dict[str, Any]:
    """``config_sentence_transformers.json``: the versions installed here (the format's where one is absent)."""
    versions: dict[str, str | None] = {}
    for key, package, fallback in (("pytorch", "torch", None), ("sentence_transformers", "sentence-transformers",
                                   FORMAT_VERSION), ("transformers", "transformers", None)):
        try:
            versions[key] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[key] = fallback
    return {"__version__": versions, "default_prompt_name": None, "model_type": "SparseEncoder",
            "prompts": {"document": "", "query": ""}, "similarity_fn_name": "dot"}
