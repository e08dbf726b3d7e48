#!/usr/bin/env bash
# The vocabulary gap in the model (docs/vocabulary-gap.md, "The gap in the model"): what `gap model` and `gap training` were measured on.
# Run from the repository root with VTREPRO_DATA and VTREPRO_MODELS set; everything goes under ${OUT:-runs/gapmodel}.
#   1. the round-trip source: splade-tiny moved onto GPT-2's cased BPE (vocabulary/gpt2.write_round_trip_source)
#   2. SciFact's first ${DOCS:-1000} documents and its 300 test queries, encoded by splade-tiny and by the source
#   3. gap model on both runs, side by side
#   4. APC (calibrate, vtrepro preset, 300 NFCorpus documents, seed 0) on the source
#   5. three trainings of one recipe (NFCorpus train, 40 steps x 8, seed 42, 2 CPU threads): the source raw, the
#      source after APC, splade-tiny (the BERT-uncased control); then gap training draws them together
#   6. the nearest settings that could show dead terms or dense collapse at this scale, each one change to that
#      recipe: the raw source and the APC source at 100x the learning rate (drawn together in gap-lr100x/), the APC
#      source without the FLOPS regularizer, and the source after the authors' APC preset; each in gap-settings/
set -euo pipefail
OUT=${OUT:-runs/gapmodel}
DOCS=${DOCS:-1000}
mkdir -p "$OUT/sub" "$OUT/recipes"
[ -f "$OUT/round-trip-source/config.json" ] || python -c "
from vtrepro.vocabulary.gpt2 import write_round_trip_source
write_round_trip_source('splade-tiny', '$OUT/round-trip-source')"
python - "$OUT/sub" "$DOCS" <<'PY'
import gzip, json, os, sys
out, docs = sys.argv[1], int(sys.argv[2])
root = os.path.join(os.environ["VTREPRO_DATA"], "beir", "scifact")
with gzip.open(f"{root}/corpus.jsonl.gz", "rt") as corpus, open(f"{out}/corpus.jsonl", "w") as sample:
    for number, line in zip(range(docs), corpus):
        sample.write(line)
test = {line.split("\t")[0] for line in open(f"{root}/qrels/test.tsv").read().splitlines()[1:]}
with gzip.open(f"{root}/queries.jsonl.gz", "rt") as queries, open(f"{out}/queries.jsonl", "w") as kept:
    kept.writelines(line for line in queries if json.loads(line)["_id"] in test)
PY
for model in splade-tiny "$OUT/round-trip-source"; do
  python -m vtrepro encode --model "$model" --corpus "$OUT/sub/corpus.jsonl" --queries "$OUT/sub/queries.jsonl" \
      --output "$OUT/$(basename "$model")-scifact$DOCS"
done
python -m vtrepro gap model --vectors "$OUT/round-trip-source-scifact$DOCS" --vectors "$OUT/splade-tiny-scifact$DOCS" \
    --output "$OUT/gap"
[ -f "$OUT/round-trip-apc/config.json" ] || python -m vtrepro calibrate --model "$OUT/round-trip-source" \
    --dataset nfcorpus --limit 300 --max-length-doc 128 --seed 0 --output "$OUT/round-trip-apc"
train_run() {  # train_run NAME MODEL LR LAMBDA: the recipe above with one learning rate and FLOPS weight
  cat > "$OUT/recipes/gap_$1.yaml" <<YAML
description: gap training curve, $1 (InfoNCE, in-batch + BM25 hard negatives, FLOPS)
model: $2
data: {format: beir, dataset: nfcorpus, split: train, min_relevance: 1, mining: bm25, depth: 100, negatives: 1}
loss: {ranking: infonce, in_batch_negatives: true, temperature: 5.0, lambda_q: $4, lambda_d: $4, flops_warmup_steps: 10}
training: {steps: 40, batch_size: 8, lr: $3, lr_warmup_steps: 4, schedule: linear, max_length_query: 32, max_length_doc: 128, save_every: 1000, seed: 42, cpu_threads: 2}
YAML
  [ -f "$OUT/train/$1/final/training_report.json" ] || \
    python -m vtrepro train --recipe "$OUT/recipes/gap_$1.yaml" --output "$OUT/train/$1"
}
train_run round_trip_raw "$OUT/round-trip-source" 2.0e-5 0.001
train_run round_trip_apc "$OUT/round-trip-apc" 2.0e-5 0.001
train_run bert_uncased splade-tiny 2.0e-5 0.001
python -m vtrepro gap training --log "$OUT/train/round_trip_raw" --log "$OUT/train/round_trip_apc" \
    --log "$OUT/train/bert_uncased" --output "$OUT/gap-training"
cp "$OUT/gap-training/training.json" "$OUT/gap/"  # gap/ now holds model.json and training.json: the report's section

[ -f "$OUT/round-trip-apc-authors/config.json" ] || python -m vtrepro calibrate --model "$OUT/round-trip-source" \
    --dataset nfcorpus --limit 300 --max-length-doc 128 --seed 0 --preset authors --output "$OUT/round-trip-apc-authors"
train_run round_trip_raw_lr100x "$OUT/round-trip-source" 2.0e-3 0.001
train_run round_trip_apc_lr100x "$OUT/round-trip-apc" 2.0e-3 0.001
train_run round_trip_apc_no_flops "$OUT/round-trip-apc" 2.0e-5 0
train_run round_trip_apc_authors "$OUT/round-trip-apc-authors" 2.0e-5 0.001
for name in round_trip_raw round_trip_raw_lr100x round_trip_apc round_trip_apc_lr100x round_trip_apc_no_flops \
    round_trip_apc_authors; do
  python -m vtrepro gap training --log "$OUT/train/$name" --output "$OUT/gap-settings/$name"
done
python -m vtrepro gap training --log "$OUT/train/round_trip_raw_lr100x" --log "$OUT/train/round_trip_apc_lr100x" \
    --output "$OUT/gap-lr100x"
