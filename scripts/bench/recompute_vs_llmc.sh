#!/usr/bin/env bash
# Issue 32's recompute table on one GPU, in one lease: sweetspot's GPT-2 1.5B bf16 training cells
# (experiments/train-gpt2.toml's variant, T = 1024) at one batch under every recompute setting, then
# llm.c's train_gpt2cu (built with cuDNN from a fetched copy, as the project's anchor notes say; none
# of its code is in this repository) at the same batch with -r 0 (keep everything), 1 (recompute
# the GELU) and 2 (and the LayerNorms). Prints scripts/bench/recompute_table.py's Markdown tables.
#   recompute_vs_llmc.sh SWEETSPOT DB BATCH [LLMC_BINARY TRAIN_BIN VAL_BIN]
set -uo pipefail
sweetspot=$1 db=$2 batch=$3
llmc=${4:-} train=${5:-} val=${6:-}
cd "$(dirname "$0")/../.."
"$sweetspot" run experiments/train-gpt2.toml --db "$db" --only model=gpt2_1.5b --only dtype=bf16 \
    --only batch="$batch" --set recompute=none,gelu,attention,mlp,block > "$db.log" 2>&1
echo "sweetspot run: rc $? ($(tail -2 "$db.log" | head -1))" >&2
logs=()
if [[ -n "$llmc" ]]; then
    for r in 0 1 2; do
        log="$db.llmc-b$batch-r$r.log"
        "$llmc" -i "$train" -j "$val" -e d48 -b "$batch" -t 1024 -d $((batch * 1024)) -x 12 -v 100000 -s 0 -h 0 \
            -r "$r" > "$log" 2>&1
        echo "llm.c -r $r: rc $?" >&2
        logs+=(--llmc "$r=$log")
    done
fi
python3 scripts/bench/recompute_table.py "$db" "${logs[@]}"
