"""Measure how far SPLADE vectors and retrieval scores move across CPU arithmetic paths.

Each path (thread count, forced ATen/MKL/oneDNN instruction set, or shard size) runs encode -> index ->
search -> evaluate in subprocesses with its own environment; its document and query vectors, total
impact and full-precision scores are then compared with the reference path (native ISA, 2 threads).
All paths run one frozen copy of the package (the committed HEAD by default), so edits made to the
working tree meanwhile cannot leak into some paths and not others.

    VTREPRO_DATA=... VTREPRO_MODELS=... python scripts/arith_envelope.py \\
        --datasets scifact,nfcorpus --work /tmp/envelope --output /tmp/envelope/table.md

Writes the markdown table to --output and the raw measurements beside it (same name, .json).
A path whose folder already holds a result for the same settings and package bytes is reused (--fresh runs
it again); give --commit to keep one revision while others commit to the repository.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vtrepro.core.io import JSON_FILE_BYTES, parse_json, read_json_file, read_jsonl
from vtrepro.encode.folder import EncodedFolder

REPO = Path(__file__).resolve().parent.parent
MODEL = "splade-tiny"
SPEC = "regressions/beir_splade_tiny.yaml"
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# Variables a caller's shell could set that would change the reference path; cleared in every path.
CONTROLLED_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                  "MKL_CBWR", "MKL_DEBUG_CPU_TYPE", "MKL_VERBOSE", "ONEDNN_VERBOSE", "OMP_NUM_THREADS",
                  "MKL_NUM_THREADS", "MKL_DYNAMIC", "PYTHONPATH")
PROBE = r"""
import hashlib, json, os, numpy as np, torch, vtrepro
rng = np.random.default_rng(0)
t = lambda *shape: torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
a, b, x, q = t(200, 128), t(128, 30522), t(64, 512), t(4, 2, 100, 64)
digest = lambda y: hashlib.sha256(y.contiguous().numpy().tobytes()).hexdigest()[:12]
F = torch.nn.functional
with torch.inference_mode():
    kernels = {"sgemm": digest(a @ b), "sdpa": digest(F.scaled_dot_product_attention(q, q, q)),
               "softmax": digest(torch.softmax(x, -1)), "gelu": digest(F.gelu(x)),
               "layer_norm": digest(F.layer_norm(x, (512,))), "log1p": digest(torch.log1p(x.abs())),
               "sum": digest(x.sum(1))}
print("PROBE " + json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
      "threads": torch.get_num_threads(), "torch": torch.__version__, "vtrepro": vtrepro.__file__,
      "kernels": kernels}))
"""


@dataclass(frozen=True)
class ArithPath:
    name: str
    threads: int
    env: dict[str, str] = field(default_factory=dict)
    shard_size: int | None = None
    kind: str = "arithmetic"  # "arithmetic", "proxy" (not one of the pinned machines' paths) or "shard"

    @property
    def key(self) -> str:
        return f"{self.name}-{self.threads}t"


def default_isa_env() -> dict[str, str]:
    """ATen's scalar kernels, MKL/oneDNN held to SSE4.2/SSE4.1 where the CPU has it, else AVX2."""
    sse42 = "sse4_2" in cpu_flags()
    return {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2" if sse42 else "AVX2",
            "ONEDNN_MAX_CPU_ISA": "SSE41" if sse42 else "AVX2"}


def all_paths() -> list[ArithPath]:
    return [
        ArithPath("native", 2),  # the reference
        ArithPath("native", 1),
        ArithPath("avx2", 2, AVX2_ENV),
        ArithPath("avx2", 1, AVX2_ENV),
        ArithPath("default-isa", 2, default_isa_env()),
        ArithPath("mkl-cbwr-compatible", 2, {"MKL_CBWR": "COMPATIBLE"}, kind="proxy"),
        ArithPath("native-shard500", 2, shard_size=500, kind="shard"),
    ]


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    match = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(match.group(1).split()) if match else set()


def machine() -> dict[str, Any]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", lscpu)
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx", "sse4", "fma", "amx")))
    return {"cpu": model.group(1).strip() if model else platform.processor(), "cpus": os.cpu_count(),
            "simd_flags": flags, "python": platform.python_version()}


def snapshot_source(work: Path, source: str, revision: str) -> dict[str, str]:
    """Freeze the package (and specs) under WORK/src: a commit (read-only ``git archive``) or the working tree."""
    target = work / "src"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{revision}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if source == "git":
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "vtrepro", "regressions"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(target, filter="data")
    else:
        for name in ("vtrepro", "regressions"):
            shutil.copytree(REPO / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    digest = hashlib.sha256()
    for path in sorted((target / "vtrepro").rglob("*.py")):
        digest.update(path.relative_to(target).as_posix().encode() + b"\0" + path.read_bytes())
    return {"source": source, "commit": commit, "package_sha256": digest.hexdigest()}


def path_env(path: ArithPath, src: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in CONTROLLED_ENV}
    env.update(path.env, OMP_NUM_THREADS=str(path.threads), MKL_NUM_THREADS=str(path.threads), PYTHONPATH=str(src))
    return env


def probe(path: ArithPath, env: dict[str, str], src: Path) -> dict[str, Any]:
    """torch's capability and thread count, MKL/oneDNN banners and kernel digests under the path's environment."""
    result = subprocess.run([sys.executable, "-c", PROBE], env={**env, "MKL_VERBOSE": "1", "ONEDNN_VERBOSE": "1"},
                            capture_output=True, text=True, cwd=src)
    if result.returncode != 0:
        raise RuntimeError(f"{path.key}: probe failed:\n{result.stderr[-2000:]}")
    lines = result.stdout.splitlines()
    info = parse_json(next(line for line in lines if line.startswith("PROBE "))[6:], f"{path.key}: the probe", "rerun")
    info["mkl"] = next((line.split(" ", 1)[1] for line in lines if line.startswith("MKL_VERBOSE oneMKL")), None)
    info["onednn_isa"] = next((line.split("isa:", 1)[1] for line in lines if "onednn_verbose" in line and "isa:" in line), None)
    if info["threads"] != path.threads:
        raise RuntimeError(f"{path.key}: torch.get_num_threads() is {info['threads']}, expected {path.threads}")
    if not info["vtrepro"].startswith(str(src)):
        raise RuntimeError(f"{path.key}: vtrepro imported from {info['vtrepro']}, not the snapshot {src}")
    return info


def run_stage(name: str, args: list[str], env: dict[str, str], folder: Path, cwd: Path) -> tuple[str, float]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", f"vtrepro.{name}", *args], env=env, cwd=cwd,
                            capture_output=True, text=True)
    (folder / f"{name}.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"vtrepro.{name} exited {result.returncode} in {folder}:\n{(result.stdout + result.stderr)[-3000:]}")
    return result.stdout, round(time.perf_counter() - started, 1)


def _same_run(earlier: dict[str, Any], config: dict[str, Any]) -> bool:
    """Same path, dataset and package bytes (the commit label may differ)."""
    return all(earlier.get(key) == config[key] for key in ("path", "dataset")) and \
        earlier.get("source", {}).get("package_sha256") == config["source"]["package_sha256"]


def run_path(path: ArithPath, dataset: str, work: Path, src: Path, source: dict[str, str], fresh: bool) -> dict[str, Any]:
    """Encode, index, search and evaluate one dataset under one path (reusing an identical earlier result)."""
    folder = work / dataset / path.key
    env = path_env(path, src)
    config = {"path": asdict(path), "dataset": dataset, "source": source}
    result_file, started_file = folder / "path.json", folder / "started.json"

    def same(file: Path) -> bool:
        return file.exists() and _same_run(read_json_file(file, "remove it", JSON_FILE_BYTES["results"]).get("config", {}),
                                           config)

    if not fresh and same(result_file):
        print(f"[{dataset} {path.key}] reusing {result_file}", file=sys.stderr)
        return read_json_file(result_file, "remove it", JSON_FILE_BYTES["results"])
    if fresh or not same(started_file):  # else an interrupted run of these settings: encode resumes its shards
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    result_file.unlink(missing_ok=True)
    started_file.write_text(json.dumps({"config": config}))
    info = probe(path, env, src)
    print(f"[{dataset} {path.key}] capability {info['capability']}, {info['threads']} threads", file=sys.stderr)
    encode = ["--model", MODEL, "--dataset", dataset, "--output", str(folder)]
    if path.shard_size:
        encode += ["--shard-size", str(path.shard_size)]
    times = {}
    _, times["encode"] = run_stage("encode", encode, env, folder, src)
    index_out, times["index"] = run_stage("index", ["--vectors", str(folder), "--output", str(folder / "index")], env, folder,
                                          src)
    _, times["search"] = run_stage("search", ["--index", str(folder / "index"), "--queries", str(folder / "queries.jsonl"),
                                              "--output", str(folder / "run.trec")], env, folder, src)
    eval_out, times["evaluate"] = run_stage("evaluate", ["--run", str(folder / "run.trec"), "--dataset", dataset],
                                            env, folder, src)
    manifest = EncodedFolder(folder).load_manifest() or {}
    index_stats = parse_json(index_out.strip().splitlines()[-1], "index's output", "rerun")
    result = {"config": config, "probe": info, "seconds": times, "total_terms": manifest["total_terms"],
              "documents": manifest["documents"], "index_stats": index_stats,
              "scores_4dp": parse_json(eval_out, "evaluate's output", "rerun")}
    result_file.write_text(json.dumps(result, indent=2))
    print(f"[{dataset} {path.key}] {times}", file=sys.stderr)
    return result


def read_vectors(files: list[Path]) -> dict[str, dict[str, int]]:
    vectors = {}
    for file in files:
        for _, record in read_jsonl(file):
            vectors[record["id"]] = record["vector"]
    return vectors


def compare_vectors(ref: dict[str, dict[str, int]], other: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Texts whose vector differs, (text, term) impacts that differ (a missing term counts as 0), max |delta|."""
    if ref.keys() != other.keys():
        raise RuntimeError(f"id sets differ: {len(ref.keys() ^ other.keys())} ids in one run only")
    texts = impacts = max_delta = 0
    for text_id, vector in ref.items():
        theirs = other[text_id]
        if vector == theirs:
            continue
        texts += 1
        deltas = [abs(vector.get(term, 0) - theirs.get(term, 0)) for term in vector.keys() | theirs.keys()]
        impacts += sum(delta > 0 for delta in deltas)
        max_delta = max(max_delta, *deltas)
    total_ref, total_other = (sum(sum(v.values()) for v in vectors.values()) for vectors in (ref, other))
    return {"texts": len(ref), "texts_differing": texts, "impacts_differing": impacts, "max_abs_delta": max_delta,
            "impact_entries": sum(len(v) for v in ref.values()), "total": total_other,
            "total_delta": total_other - total_ref, "total_relative": (total_other - total_ref) / total_ref}


def per_query(run_file: Path, qrels: dict, metrics: list[str]) -> dict[str, dict[str, float]]:
    from vtrepro.evaluate.trec import per_query_scores
    from vtrepro.search.runs import read_trec_run

    run = read_trec_run(run_file)
    return {metric: per_query_scores(run, qrels, metric) for metric in metrics}


def means(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over judged queries at full precision, as vtrepro.evaluate computes it before rounding."""
    return {metric: sum(values.values()) / len(values) for metric, values in scores.items()}


def boundary_margin(value: float) -> float:
    """Distance from ``value`` to the nearest point where its 4-decimal rounding flips."""
    return abs(abs(value * 1e4 - round(value * 1e4)) - 0.5) / 1e4


def compare_dataset(dataset: str, results: dict[str, dict], work: Path, reference: str) -> dict[str, Any]:
    from vtrepro.data.beir import load_dataset
    from vtrepro.search.runs import read_trec_run

    qrels = load_dataset(dataset).qrels("test")
    metrics = list(results[reference]["scores_4dp"])

    def folder(key: str) -> Path:
        return work / dataset / key

    ref_docs = read_vectors(sorted((folder(reference) / "vectors").glob("part-*.jsonl")))
    ref_queries = read_vectors([folder(reference) / "queries.jsonl"])
    ref_run = read_trec_run(folder(reference) / "run.trec")
    ref_per_query = per_query(folder(reference) / "run.trec", qrels, metrics)
    ref_scores = means(ref_per_query)
    comparisons = {}
    for key, result in results.items():
        docs = compare_vectors(ref_docs, read_vectors(sorted((folder(key) / "vectors").glob("part-*.jsonl"))))
        if docs["total"] != result["total_terms"] or result["index_stats"]["total_terms"] != result["total_terms"]:
            raise RuntimeError(f"{dataset} {key}: vectors, manifest and index disagree on the total impact")
        scores_per_query = per_query(folder(key) / "run.trec", qrels, metrics)
        scores = means(scores_per_query)
        run = read_trec_run(folder(key) / "run.trec")
        comparisons[key] = {
            "documents": docs, "queries": compare_vectors(ref_queries, read_vectors([folder(key) / "queries.jsonl"])),
            "scores": scores, "score_delta": {m: scores[m] - ref_scores[m] for m in metrics},
            "scores_4dp_equal": result["scores_4dp"] == results[reference]["scores_4dp"],
            "per_query_max_abs_delta": {m: max(abs(scores_per_query[m][q] - ref_per_query[m][q]) for q in qrels)
                                        for m in metrics},
            "queries_with_changed_hits": sum(ref_run.get(q) != run.get(q) for q in ref_run.keys() | run.keys()),
            "kernels_changed": sorted(k for k, v in result["probe"]["kernels"].items()
                                      if v != results[reference]["probe"]["kernels"][k]),
        }
    return {"metrics": metrics, "reference_scores": ref_scores,
            "reference_rounding_margin": {m: boundary_margin(v) for m, v in ref_scores.items()}, "paths": comparisons}


def pinned_values(src: Path, dataset: str) -> dict[str, Any] | None:
    import yaml

    spec = src / SPEC
    if not spec.exists():
        return None
    node = yaml.safe_load(spec.read_text())["conditions"][MODEL]["datasets"].get(dataset)
    return None if node is None else {"total_terms": node["index"]["total_terms"], "scores": node["scores"]}


def markdown(dataset: str, paths: list[ArithPath], results: dict, comparison: dict, pinned: dict | None) -> str:
    metrics = comparison["metrics"]
    ref_key = paths[0].key
    lines = [f"### {dataset}", ""]
    ref_total = results[ref_key]["total_terms"]
    line = f"Reference ({ref_key}): total impact {ref_total:,}; scores " + ", ".join(
        f"{m} {v:.6f} (±{comparison['reference_rounding_margin'][m]:.1e} from a 4-dp flip)"
        for m, v in comparison["reference_scores"].items())
    if pinned:
        delta = ref_total - pinned["total_terms"]
        line += (f". Pinned spec: {pinned['total_terms']:,} (reference Δ {delta:+,}, {delta / pinned['total_terms']:+.2e});"
                 f" pinned scores {'equal' if results[ref_key]['scores_4dp'] == pinned['scores'] else 'DIFFER'} at 4 decimals")
    lines += [line + ".", ""]
    header = ["path", "threads", "cpu capability", "kernels ≠ ref", "docs differing", "impacts differing",
              "max \\|Δimpact\\|", "Δ total impact (relative)", "query impacts differing (queries)",
              *[f"\\|Δ {m}\\|" for m in metrics], "max per-query \\|Δscore\\|", "4-dp scores equal", "queries with changed hits"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for path in paths:
        result, comp = results[path.key], comparison["paths"][path.key]
        docs, queries = comp["documents"], comp["queries"]
        label = path.name + (" (reference)" if path.key == ref_key else "") + (
            f" (shard size {path.shard_size})" if path.shard_size else "") + (" (proxy)" if path.kind == "proxy" else "")
        row = [label, str(path.threads), result["probe"]["capability"], ", ".join(comp["kernels_changed"]) or "none",
               f"{docs['texts_differing']:,} / {docs['texts']:,}",
               f"{docs['impacts_differing']:,} / {docs['impact_entries']:,}", str(docs["max_abs_delta"]),
               f"{docs['total_delta']:+,} ({docs['total_relative']:+.2e})",
               f"{queries['impacts_differing']} ({queries['texts_differing']} / {queries['texts']})",
               *[f"{abs(comp['score_delta'][m]):.2e}" if comp["score_delta"][m] else "0" for m in metrics],
               f"{max(comp['per_query_max_abs_delta'].values()):.2e}" if any(comp["per_query_max_abs_delta"].values()) else "0",
               "yes" if comp["scores_4dp_equal"] else "no", str(comp["queries_with_changed_hits"])]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def envelope(paths: list[ArithPath], comparisons: dict[str, dict], kinds: tuple[str, ...]) -> dict[str, Any]:
    """Maxima over every dataset and every path of the given kinds."""
    rel, score, impact = 0.0, 0.0, 0
    for comparison in comparisons.values():
        for path in paths:
            if path.kind in kinds:
                comp = comparison["paths"][path.key]
                rel = max(rel, abs(comp["documents"]["total_relative"]))
                impact = max(impact, comp["documents"]["max_abs_delta"], comp["queries"]["max_abs_delta"])
                score = max(score, *(abs(d) for d in comp["score_delta"].values()))
    return {"max_relative_total_delta": rel, "max_abs_score_delta": score, "max_abs_impact_delta": impact}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="scifact,nfcorpus", help="comma-separated BEIR datasets")
    parser.add_argument("--work", type=Path, default=Path("/tmp/envelope"), help="work folder (one subfolder per run)")
    parser.add_argument("--output", type=Path, default=Path("docs-table.md"), help="markdown table; raw JSON beside it")
    parser.add_argument("--paths", help="comma-separated path keys to run (default all; the reference always runs): "
                                        + ", ".join(p.key for p in all_paths()))
    parser.add_argument("--source", choices=("git", "worktree"), default="git",
                        help="package copy to run: the --commit (default) or the current working tree")
    parser.add_argument("--commit", default="HEAD", help="revision whose package runs with --source git (default HEAD)")
    parser.add_argument("--fresh", action="store_true", help="rerun paths even where an identical result exists")
    args = parser.parse_args()

    for variable in ("VTREPRO_DATA", "VTREPRO_MODELS"):
        if not os.environ.get(variable):
            parser.error(f"set {variable}")
    paths = all_paths()
    if args.paths:
        wanted = set(args.paths.split(","))
        unknown = wanted - {p.key for p in paths}
        if unknown:
            parser.error(f"unknown paths: {', '.join(sorted(unknown))}")
        paths = [p for i, p in enumerate(paths) if i == 0 or p.key in wanted]
    started = time.perf_counter()
    work = args.work.resolve()
    source = snapshot_source(work, args.source, args.commit)
    src = work / "src"
    sys.path.insert(0, str(src))
    datasets = args.datasets.split(",")

    results = {d: {p.key: run_path(p, d, work, src, source, args.fresh) for p in paths} for d in datasets}
    comparisons = {d: compare_dataset(d, results[d], work, paths[0].key) for d in datasets}
    info = machine()
    info["mkl"] = results[datasets[0]][paths[0].key]["probe"]["mkl"]
    info["torch"] = results[datasets[0]][paths[0].key]["probe"]["torch"]
    envelopes = {"arithmetic": envelope(paths, comparisons, ("arithmetic",)),
                 "arithmetic+proxy": envelope(paths, comparisons, ("arithmetic", "proxy")),
                 "shard": envelope(paths, comparisons, ("shard",))}
    wall = round(time.perf_counter() - started)
    stage_seconds = round(sum(sum(r["seconds"].values()) for runs in results.values() for r in runs.values()))

    text = [f"## CPU arithmetic envelope: {MODEL}", "",
            f"Machine: {info['cpu']}, {info['cpus']} CPUs, SIMD flags {' '.join(info['simd_flags'])}; torch {info['torch']}; "
            f"MKL: {info['mkl']}. Package: {source['source']} at {source['commit'][:12]}. "
            f"Wall time {wall // 60} min {wall % 60} s "
            f"(stages of all runs, reused ones included: {stage_seconds // 60} min).",
            "", "Paths: " + "; ".join(f"`{p.key}`: " + (" ".join(f"{k}={v}" for k, v in p.env.items()) or "no ISA override")
                                      + (f", --shard-size {p.shard_size}" if p.shard_size else "") for p in paths) + ".",
            "Δ is relative to the reference; score deltas at full precision. `kernels ≠ ref`: probe kernels whose "
            "output bits differ from the reference's under this environment.", ""]
    for dataset in datasets:
        text.append(markdown(dataset, paths, results[dataset], comparisons[dataset], pinned_values(src, dataset)))
    text.append("Envelope (max over datasets): " + "; ".join(
        f"{kind}: relative Δ total {e['max_relative_total_delta']:.2e}, |Δscore| {e['max_abs_score_delta']:.2e}, "
        f"|Δimpact| {e['max_abs_impact_delta']}" for kind, e in envelopes.items()) + ".\n")
    table = "\n".join(text)
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table)
    raw = {"machine": info, "source": source, "wall_seconds": wall, "stage_seconds": stage_seconds,
           "paths": [asdict(p) | {"key": p.key} for p in paths],
           "results": results, "comparisons": comparisons, "envelopes": envelopes,
           "pinned": {d: pinned_values(src, d) for d in datasets}}
    args.output.with_suffix(".json").write_text(json.dumps(raw, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
