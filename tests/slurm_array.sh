#!/usr/bin/env bash
# sweetspot submit against a real Slurm on this machine: munge, slurmctld and slurmd from Debian's
# packages, started here without systemd and stopped at the end. A host-backend matrix goes out as a
# 4-task array; the task whose shard holds a hanging cell is requeued while that cell runs
# (scontrol requeue); then every shard database must pass integrity_check, the shards together must
# hold every cell exactly once, the requeued shard must show two runs with its first run's cells
# kept, and the shards merged (sweetspot merge, twice) must hold every cell once. Exits 77 (ctest: skipped) saying why where Slurm cannot run here.
#   slurm_array.sh SWEETSPOT_BINARY
set -uo pipefail
bin=$1
skip() { echo "slurm test skipped: $*"; exit 77; }
fail() { echo "slurm test FAILED: $*"; for f in "$scratch"/*.out "$res"/slurm-*.out; do [[ -f $f ]] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "it needs root to start munged, slurmctld and slurmd"
for t in munge unmunge sbatch squeue scontrol sinfo sqlite3; do command -v "$t" >/dev/null || skip "$t is not installed (scripts/install-deps.sh installs Slurm)"; done
for t in munged slurmctld slurmd; do [[ -x /usr/sbin/$t ]] || skip "/usr/sbin/$t is not installed"; done
[[ -f /etc/munge/munge.key ]] || skip "no /etc/munge/munge.key (the munge package creates it)"
host=$(hostname -s)
getent hosts "$host" >/dev/null || skip "this machine's name $host does not resolve"

# One Slurm test at a time on a machine: two test suites at once (a checkout's and a clean clone's)
# would start slurmctld on the same ports, and the first to finish would stop the munged both use.
command -v flock >/dev/null || skip "flock is not installed (util-linux)"
exec 9>/tmp/sweetspot-slurm-test.lock
flock 9

scratch=$(mktemp -d /tmp/sweetspot-slurm.XXXXXX)
# The shards' folder has a name the batch script must quote for bash and for sbatch, with a '%'
# that Slurm's file-name patterns must not expand.
res="$scratch/res 'a' #1 100%j"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$scratch"; }
trap cleanup EXIT
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
    local limit=$1; shift
    for ((i = 0; i < limit * 10; ++i)); do "$@" && return 0; sleep 0.1; done
    "$@"
}
munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

if ! munge_works; then
    install -d -o munge -g munge -m 0755 /run/munge
    setsid runuser -u munge -- /usr/sbin/munged --foreground > "$scratch/munged.out" 2>&1 </dev/null &
    pids+=($!)
    wait_for 10 munge_works || fail "munged did not start"
fi
cat > "$scratch/slurm.conf" <<CONF
ClusterName=sweetspot
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$scratch/ctld
SlurmdSpoolDir=$scratch/d
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/slurmctld.log
SlurmdLogFile=$scratch/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$host CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
mkdir -p "$scratch/ctld" "$scratch/d"
export SLURM_CONF=$scratch/slurm.conf
setsid slurmctld -D -f "$SLURM_CONF" > "$scratch/ctld.out" 2>&1 </dev/null &
pids+=($!)
setsid slurmd -D -f "$SLURM_CONF" > "$scratch/d.out" 2>&1 </dev/null &
pids+=($!)
node_idle() { sinfo -h -o %t 2>/dev/null | grep -q idle; }
wait_for 30 node_idle || fail "the Slurm node did not come up"

# Ten quick cells and one that hangs until its timeout: the requeue lands in the middle of it.
cat > "$scratch/m.toml" <<'TOML'
name = "slurmtest"
[defaults]
model = "tiny"
seq = 8
iterations = 1
[[sweep]]
name = "quick"
batch = [1, 2]
seed = [1, 2, 3, 4, 5]
[[sweep]]
name = "slow"
seed = 999777
debug_fault = "hang"
timeout = "6s"
TOML
cells=$("$bin" list "$scratch/m.toml" | sed -n 's/.*: \([0-9]*\) cells.*/\1/p' | head -1)
slow_shard=
for i in 1 2 3 4; do "$bin" list "$scratch/m.toml" --shard "$i/4" 2>/dev/null | grep -q "999777" && slow_shard=$i; done
[[ -n $slow_shard ]] || fail "no shard holds the slow cell"

out=$("$bin" submit "$scratch/m.toml" --tasks 4 --results "$res" 2>&1) || fail "submit: $out"
job=$(echo "$out" | sed -n 's/.*submitted job array \([0-9]*\).*/\1/p')
[[ -n $job ]] || fail "no job id in: $out"
slow_running() { pgrep -f "seed=999777" >/dev/null; }
wait_for 60 slow_running || fail "the slow cell never started"
scontrol requeue "${job}_${slow_shard}" || fail "scontrol requeue ${job}_${slow_shard}"
# Slurm holds a requeued job back a while (its BeginTime); the test has no time to wait.
requeued_pending() { [[ $(squeue -h -j "${job}_${slow_shard}" -o %t 2>/dev/null) == PD ]]; }
wait_for 30 requeued_pending && scontrol update JobId="${job}_${slow_shard}" StartTime=now
array_done() { [[ -z $(squeue -h -j "$job" 2>/dev/null) ]]; }
wait_for 120 array_done || fail "the array did not finish: $(squeue -j "$job")"

keys=()
for i in 1 2 3 4; do
    db=$res/slurmtest.shard-$i-of-4.db
    [[ -f $db ]] || fail "shard $i wrote no database"
    [[ $(sqlite3 "$db" "PRAGMA integrity_check") == ok ]] || fail "shard $i: integrity_check"
    mapfile -t -O "${#keys[@]}" keys < <(sqlite3 "$db" "SELECT cell_key FROM cells")
done
for i in 1 2 3 4; do [[ -f "$res/slurm-${job}_$i.out" ]] || fail "task $i's output is not $res/slurm-${job}_$i.out"; done
distinct=$(printf '%s\n' "${keys[@]}" | sort -u | wc -l)
[[ ${#keys[@]} -eq $cells && $distinct -eq $cells ]] || fail "${#keys[@]} cells (${distinct} distinct) in the shards, the matrix has $cells"
slow_db=$res/slurmtest.shard-$slow_shard-of-4.db
runs=$(sqlite3 "$slow_db" "SELECT count(*) FROM runs")
[[ $runs -ge 2 ]] || fail "the requeued shard shows $runs run(s)"
[[ $(sqlite3 "$slow_db" "SELECT status FROM cells WHERE seed = 999777") == timeout ]] || fail "the slow cell is not recorded once, timed out"
[[ $(sqlite3 "$slow_db" "SELECT count(*) FROM cells WHERE run_id = 1") -ge 1 ]] || fail "the requeued shard measured its first run's cells again"
# The shards merged into one database: every cell once, and merging again changes nothing.
shards=("$res"/slurmtest.shard-*-of-4.db)
"$bin" merge -o "$scratch/merged.db" "${shards[@]}" > "$scratch/merge.out" 2>&1 || fail "merge: $(cat "$scratch/merge.out")"
"$bin" merge -o "$scratch/merged.db" "${shards[@]}" > "$scratch/merge-again.out" 2>&1 || fail "merge again"
grep -q " 0 cells added" "$scratch/merge-again.out" || fail "merging again added cells: $(cat "$scratch/merge-again.out")"
[[ $(sqlite3 "$scratch/merged.db" "PRAGMA integrity_check") == ok ]] || fail "merged: integrity_check"
[[ $(sqlite3 "$scratch/merged.db" "SELECT count(*) = $cells AND count(DISTINCT cell_key) = $cells FROM cells") == 1 ]] ||
    fail "the merged database does not hold each of the $cells cells once"
echo "slurm test: ok: job $job, $cells cells over 4 shards, shard $slow_shard requeued mid-cell and resumed ($runs runs), merged"
