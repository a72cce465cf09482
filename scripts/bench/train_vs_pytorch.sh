#!/usr/bin/env bash
# Training against PyTorch on one GPU, in one lease: sweetspot's training cells of one model (by
# default issue 31's, experiments/train-gpt2.toml's GPT-2 1.5B at T = 1024) at the given dtypes and
# batches, then scripts/bench/pytorch_train.py at the same ones, each side its median step. Prints a
# Markdown table with the ratio at each batch and at each side's best batch per dtype.
#   train_vs_pytorch.sh SWEETSPOT DB "bf16 fp32" "4 8"
#   MODEL=llama_1b MATRIX=experiments/train-llama.toml SEQ=2048 train_vs_pytorch.sh SWEETSPOT DB bf16 "1 2 4"
# A batch PyTorch cannot fit reads "out of memory"; a sweetspot cell skipped as predicted OOM
# reads as its status. SET="split_tf32=true" (any --set of `sweetspot run`) sets an axis in
# sweetspot's cells; the table names a split_tf32 dtype so.
set -uo pipefail
sweetspot=$1 db=$2 dtypes=$3 batches=$4
model=${MODEL:-gpt2_1.5b} matrix=${MATRIX:-experiments/train-gpt2.toml} seq=${SEQ:-1024}
cd "$(dirname "$0")/../.."
set_axis=()
if [[ -n "${SET:-}" ]]; then set_axis=(--set "$SET"); fi
"$sweetspot" run "$matrix" --db "$db" --only model="$model" --only dtype="${dtypes// /,}" \
    --only batch="${batches// /,}" --only seq="$seq" "${set_axis[@]}" > "$db.log" 2>&1
echo "sweetspot run: rc $? ($(tail -2 "$db.log" | head -1))" >&2
python3 scripts/bench/pytorch_train.py --model "$model" --dtypes "${dtypes// /,}" --batches "${batches// /,}" \
    --seq "$seq" > "$db.pytorch.txt" 2>"$db.pytorch.log"
echo "pytorch_train.py: rc $?" >&2
python3 scripts/bench/train_side_by_side.py "$db" "$db.pytorch.txt" --model "$model"
