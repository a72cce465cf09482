#include "harness/cli/slurm_submit.hpp"

#include <sstream>

namespace sweetspot {

std::string shell_quote(const std::string& word) {
    std::string out = "'";
    for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string shard_database(const SlurmJob& job, int shard) {
    return job.results_dir + "/" + job.name + ".shard-" + std::to_string(shard) + "-of-" + std::to_string(job.tasks) + ".db";
}

std::string slurm_batch_script(const SlurmJob& job) {
    const std::string n = std::to_string(job.tasks);
    std::ostringstream s;
    s << "#!/bin/bash\n"
      << "# Written by sweetspot submit for " << job.matrix << ".\n"
      << "# Task i runs shard i of " << n << " into a database on node-local disk and copies it to\n"
      << "# " << job.results_dir << " when it ends. Warned before its time limit (USR1), it stops\n"
      << "# the sweep, copies the database back and requeues itself; stopped by Slurm (TERM: preemption,\n"
      << "# which requeues it, or scancel), it stops and copies back. A task that starts again resumes\n"
      << "# from that copy, so no finished cell is measured twice.\n"
      << "#SBATCH --job-name=sweetspot-" << job.name << "\n"
      << "#SBATCH --array=1-" << n << (job.array_parallelism ? "%" + std::to_string(*job.array_parallelism) : "") << "\n"
      << "#SBATCH --ntasks=1\n"
      << "#SBATCH --output=" << job.results_dir << "/slurm-%A_%a.out\n"
      << "#SBATCH --open-mode=append\n"
      << "#SBATCH --signal=B:USR1@" << job.signal_seconds << "\n"
      << "#SBATCH --requeue\n";
    if (job.partition) s << "#SBATCH --partition=" << *job.partition << "\n";
    if (job.time) s << "#SBATCH --time=" << *job.time << "\n";
    if (job.gpus_per_task > 0) s << "#SBATCH --gpus-per-task=" << job.gpus_per_task << "\n";
    for (const std::string& extra : job.extra_sbatch) s << "#SBATCH " << extra << "\n";
    s << "set -u\n"
      << "shard=$SLURM_ARRAY_TASK_ID\n"
      << "final=" << shell_quote(job.results_dir + "/" + job.name + ".shard-") << "\"$shard\"" << shell_quote("-of-" + n + ".db")
      << "\n"
      << "scratch=$(mktemp -d \"${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/sweetspot-shard-$shard.XXXXXX\") || exit 1\n"
      << "db=$scratch/shard.db\n"
      << "# A requeued task resumes from what an earlier attempt copied back.\n"
      << "[ -f \"$final\" ] && cp \"$final\" \"$db\"\n"
      << "[ -f \"$final-wal\" ] && cp \"$final-wal\" \"$db-wal\"\n"
      << "# The database and, if the sweep left one, its write-ahead log, each replaced whole.\n"
      << "copy_back() {\n"
      << "    [ -f \"$db\" ] || return 0\n"
      << "    cp \"$db\" \"$final.part\" && mv \"$final.part\" \"$final\"\n"
      << "    if [ -s \"$db-wal\" ]; then cp \"$db-wal\" \"$final-wal.part\" && mv \"$final-wal.part\" \"$final-wal\"; "
         "else rm -f \"$final-wal\"; fi\n"
      << "}\n"
      << "# The sweep stops at SIGINT: it abandons the cell in flight and keeps the finished ones.\n"
      << "stop() {\n"
      << "    kill -INT \"$pid\" 2>/dev/null\n"
      << "    wait \"$pid\"\n"
      << "    copy_back\n"
      << "    rm -rf \"$scratch\"\n"
      << "}\n"
      << "trap 'stop; scontrol requeue \"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}\"; exit 0' USR1\n"
      << "trap 'stop; exit 143' TERM\n"
      << shell_quote(job.sweetspot) << " run " << shell_quote(job.matrix) << " --shard \"$shard/" << n << "\" --db \"$db\"";
    for (const std::string& only : job.only) s << " --only " << shell_quote(only);
    for (const std::string& set : job.overrides) s << " --set " << shell_quote(set);
    s << " &\n"
      << "pid=$!\n"
      << "wait \"$pid\"\n"
      << "status=$?\n"
      << "copy_back\n"
      << "rm -rf \"$scratch\"\n"
      << "exit $status\n";
    return s.str();
}

}  // namespace sweetspot
