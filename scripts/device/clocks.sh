#!/usr/bin/env bash
# GPT-3 6.7B fp32 b1 s1024 under `device` (baseline and all), then PyTorch SDPA on the same shape,
# with the SM clock, power and the active clock-event reasons sampled every 50 ms beside each, and
# one line per side: busy samples (power above 300 W), mean SM clock and power, and how often each
# clock-event reason was active (0x4: the software power cap). The table of docs/benchmarks-history.md.
# SWEETSPOT_BINARY names the binary (default build/sweetspot); samples go to $OUT (default out).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${SWEETSPOT_BINARY:-build/sweetspot}
out=${OUT:-out}
mkdir -p "$out"
db=$(mktemp -u /tmp/clocks-XXXXXX.db)
q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=power.limit,clocks.max.sm --format=csv
nvidia-smi --query-gpu=$q --format=csv,noheader -lms 50 > "$out/smi-sweetspot.csv" & sampler=$!
"$bin" run experiments/bench-variants-device.toml --only dtype=fp32 --only model=gpt3_6.7b --db "$db" > "$out/clocks-run.log" 2>&1
kill $sampler
grep -E "\] ok" "$out/clocks-run.log"
nvidia-smi --query-gpu=$q --format=csv,noheader -lms 50 > "$out/smi-pytorch.csv" & sampler=$!
python3 scripts/bench/pytorch_eager.py --models gpt3_6.7b --configs fp32:1:1024 --attn sdpa --iters 20
kill $sampler
rm -f "$db" "$db-wal" "$db-shm"
for side in sweetspot pytorch; do
    echo "$side: $(wc -l < "$out/smi-$side.csv") samples"
    awk -F', ' '$4+0 > 300 {n++; c+=$2; p+=$4; r[$6]++}
        END {printf "  busy samples %d, mean sm clock %.0f MHz, mean power %.0f W\n", n, c/n, p/n;
             for (k in r) print "  reason", k, r[k]}' "$out/smi-$side.csv"
done
