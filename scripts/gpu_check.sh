#!/usr/bin/env bash
# The first run on a GPU, within 10 minutes on one GPU: CUDA encode throughput (float32 and bfloat16 bodies,
# against sentence-transformers' SparseEncoder on the same GPU), bfloat16 agreement with CPU float32 vectors,
# a torchrun encode equal to one process plus an nccl collective, and a 200-step paper-recipe smoke
# (ModernBERT-base shape, random weights). Figures in docs/scale.md's table format go to --output
# (default runs/gpu-check/figures.md), never into docs/.
#
#   scripts/gpu_check.sh [--cpu] [--output FILE] [--model DIR] [--model-dir DIR] [--data-dir DIR]
#
# --cpu runs the same parts at a tiny size on the CPU (tests/integration/test_gpu_check.py). Models and data come from
# --model-dir/--data-dir or $VTREPRO_MODELS/$VTREPRO_DATA (splade-tiny; BEIR scifact and nfcorpus).
# Exit status: 0 all parts passed, 1 a part failed or a fingerprint differed, 124 past the time limit
# (the figures measured until then are kept), 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
limit=${GPU_CHECK_SECONDS:-600}
python=${PYTHON:-$(command -v python || command -v python3)}
exec timeout --signal=TERM --kill-after=15 "$limit" "$python" -c "import sys; from vtrepro.bench.command import gpu_check_main; sys.exit(gpu_check_main())" "$@"
