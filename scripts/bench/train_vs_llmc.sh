#!/usr/bin/env bash
# Issue 31's side-by-side table on one GPU, in one lease: sweetspot's GPT-2 1.5B training cells
# (experiments/train-gpt2.toml, bf16, flash attention, T = 1024) at the given batches, and llm.c's
# train_gpt2cu (built with cuDNN from a fetched copy, as the project's anchor notes say; none of
# its code is in this repository) at the same batches, each its median tokens/s over its last
# steps. Prints a Markdown table.
#   train_vs_llmc.sh SWEETSPOT DB "4 16 24" [LLMC_BINARY TRAIN_BIN VAL_BIN]
# LLMC_BINARY's steps are read from its `| N tok/s` lines (its 12 steps, the first 2 dropped).
# RECOMPUTE (default: the matrix's, gelu) sets sweetspot's recompute axis and VARIANT (default: the
# matrix's) its variant; llm.c runs with -r 0 (nothing recomputed, its fastest) either way.
set -uo pipefail
sweetspot=$1 db=$2 batches=$3
llmc=${4:-} train=${5:-} val=${6:-}
cd "$(dirname "$0")/../.."
batch_list=$(echo "$batches" | tr ' ' ',')
"$sweetspot" run experiments/train-gpt2.toml --db "$db" --only model=gpt2_1.5b --only dtype=bf16 \
    --set batch="$batch_list" ${RECOMPUTE:+--set recompute="$RECOMPUTE"} \
    ${VARIANT:+--set variant="$VARIANT"} > "$db.log" 2>&1
echo "sweetspot run: rc $? ($(tail -2 "$db.log" | head -1))" >&2

median() { sort -n | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }

echo "| batch | sweetspot tokens/s | sweetspot MFU % | sweetspot status | llm.c tokens/s | llm.c MFU % | sweetspot / llm.c |"
echo "|---|---|---|---|---|---|---|"
for b in $batches; do
    ours=$(python3 - "$db" "$b" "${RECOMPUTE:-}" <<'PY'
import sqlite3, sys
row = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute(
    "SELECT status, tokens_per_s, mfu_pct, reason FROM cells WHERE model = 'gpt2_1.5b' AND dtype = 'bf16' "
    "AND mode = 'train' AND batch = ? AND recompute = coalesce(nullif(?, ''), recompute) "
    "ORDER BY cell_id DESC LIMIT 1", (int(sys.argv[2]), sys.argv[3])).fetchone()
if row is None:
    print("- - missing")
elif row[0] != "ok":
    print(f"- - {row[0]}:{(row[3] or '')[:40].replace(' ', '_')}")
else:
    print(f"{row[1]:.0f} {row[2]:.1f} ok")
PY
)
    read -r tok mfu status <<< "$ours"
    ltok=- lmfu=-
    if [[ -n "$llmc" ]]; then
        log="$db.llmc-b$b.log"
        "$llmc" -i "$train" -j "$val" -e d48 -b "$b" -t 1024 -d $((b * 1024)) -x 12 -v 100000 -s 0 -h 0 -r 0 > "$log" 2>&1
        ltok=$(grep -o '[0-9.]* tok/s' "$log" | tail -n +3 | awk '{print $1}' | median)
        lmfu=$(grep -o '[0-9.]*% bf16 MFU' "$log" | tail -n +3 | tr -d '%' | awk '{print $1}' | median)
        grep -q "out of memory" "$log" && ltok="OOM"
    fi
    ratio=$(awk -v a="$tok" -v b="$ltok" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-"}')
    echo "| $b | $tok | $mfu | $status | $ltok | $lmfu | $ratio |"
done
