#!/usr/bin/env bash
# Issue 31's table against PyTorch on one GPU, in one lease: sweetspot's GPT-2 1.5B training cells
# (experiments/train-gpt2.toml: its variant, T = 1024) at the given dtypes and batches, then
# scripts/bench/pytorch_train.py at the same ones, each side its median step. Prints a Markdown
# table with the ratio at each batch and at each side's best batch per dtype.
#   train_vs_pytorch.sh SWEETSPOT DB "bf16 fp32" "4 8"
# A batch PyTorch cannot fit reads "out of memory"; a sweetspot cell skipped as predicted OOM
# reads as its status. SET="split_tf32=true" (any --set of `sweetspot run`) sets an axis in
# sweetspot's cells; the table names a split_tf32 dtype so.
set -uo pipefail
sweetspot=$1 db=$2 dtypes=$3 batches=$4
cd "$(dirname "$0")/../.."
set_axis=()
if [[ -n "${SET:-}" ]]; then set_axis=(--set "$SET"); fi
"$sweetspot" run experiments/train-gpt2.toml --db "$db" --only model=gpt2_1.5b --only dtype="${dtypes// /,}" \
    --only batch="${batches// /,}" "${set_axis[@]}" > "$db.log" 2>&1
echo "sweetspot run: rc $? ($(tail -2 "$db.log" | head -1))" >&2
python3 scripts/bench/pytorch_train.py --model gpt2_1.5b --dtypes "${dtypes// /,}" --batches "${batches// /,}" \
    > "$db.pytorch.txt" 2>"$db.pytorch.log"
echo "pytorch_train.py: rc $?" >&2
python3 scripts/bench/train_side_by_side.py "$db" "$db.pytorch.txt"
