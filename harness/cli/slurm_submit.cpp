#include "harness/cli/slurm_submit.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "harness/matrix/matrix.hpp"

namespace sweetspot {
namespace {

// A value the batch script holds, named as the user gave it.
struct ScriptValue {
    std::string source;
    std::string text;
    bool on_sbatch_line;
};

std::vector<ScriptValue> script_values(const SlurmJob& job) {
    std::vector<ScriptValue> values = {{"the path of the sweetspot binary", job.sweetspot, false},
                                       {"FILE", job.matrix, false},
                                       {"--results", job.results_dir, true}};
    if (job.partition) values.push_back({"--partition", *job.partition, true});
    if (job.time) values.push_back({"--time", *job.time, true});
    for (const std::string& only : job.only) values.push_back({"--only", only, false});
    for (const std::string& set : job.overrides) values.push_back({"--set", set, false});
    for (const std::string& extra : job.extra_sbatch) values.push_back({"the sbatch option after --", extra, true});
    return values;
}

// Every value comes from the command line or the file system, and the script is bash that every
// array task runs. A line break in a comment or an #SBATCH line would end it, and the task would
// run the rest as a command; sbatch, for its part, reads each #SBATCH line by rules of its own.
void require_scriptable(const SlurmJob& job) {
    for (const ScriptValue& v : script_values(job)) {
        if (const std::string escaped = escape_controls(v.text); escaped != v.text)
            throw std::invalid_argument(v.source + " '" + escaped +
                                        "' holds a control character (shown escaped), which a batch script cannot hold: "
                                        "after a line break, every array task would run the rest as a command. Give it "
                                        "without control characters (rename the file or folder it names)");
        if (!v.on_sbatch_line) continue;
        std::string lower;
        for (const char c : v.text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (const char* word : {"hetjob", "packjob"})
            if (lower.find(word) != std::string::npos)
                throw std::invalid_argument(v.source + " '" + v.text + "' holds '" + word + "': sbatch reads an #SBATCH line "
                                            "holding that word as the start of another part of a heterogeneous job, which "
                                            "a job array cannot be. Give it without that word");
    }
    if (job.results_dir.find('\\') != std::string::npos)
        throw std::invalid_argument("--results '" + job.results_dir + "' holds a backslash: in the tasks' output file name "
                                    "(--output) Slurm then expands none of %A and %a, so every task would write to one "
                                    "file, named without the backslash. Choose a folder without one");
}

// One #SBATCH line of one option, which sbatch reads as one word whatever the option holds. sbatch
// splits these lines itself (src/sbatch/opt.c): blanks separate words, quotes group them, a
// backslash escapes the next character and an unquoted '#' ends the line. An option of other
// characters is written as it is.
std::string sbatch_line(const std::string& option) {
    const bool plain = std::all_of(option.begin(), option.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("-_=:,./@%+").find(c) != std::string_view::npos;
    });
    if (plain) return "#SBATCH " + option + "\n";
    std::string quoted = "\"";
    for (const char c : option) {
        if (c == '"' || c == '\\' || c == '#') quoted += '\\';
        quoted += c;
    }
    return "#SBATCH " + quoted + "\"\n";
}

// A folder as a file-name pattern of sbatch's --output, where '%' starts a replacement.
std::string output_pattern_folder(const std::string& folder) {
    std::string out;
    for (const char c : folder) out += c == '%' ? std::string("%%") : std::string(1, c);
    return out;
}

}  // namespace

std::string shell_quote(const std::string& word) {
    std::string out = "'";
    for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string shard_database(const SlurmJob& job, int shard) {
    return job.results_dir + "/" + job.name + ".shard-" + std::to_string(shard) + "-of-" + std::to_string(job.tasks) + ".db";
}

std::string slurm_batch_script(const SlurmJob& job) {
    require_scriptable(job);
    const std::string n = std::to_string(job.tasks);
    std::ostringstream s;
    s << "#!/bin/bash\n"
      << "# Written by sweetspot submit for " << job.matrix << ".\n"
      << "# Task i runs shard i of " << n << " into a database on node-local disk and copies it to\n"
      << "# " << job.results_dir << " when it ends. Warned before its time limit (USR1), it stops\n"
      << "# the sweep, copies the database back and requeues itself; stopped by Slurm (TERM: preemption,\n"
      << "# which requeues it, or scancel), it stops and copies back. A task that starts again resumes\n"
      << "# from that copy, so no finished cell is measured twice.\n"
      << sbatch_line("--job-name=sweetspot-" + job.name)
      << sbatch_line("--array=1-" + n + (job.array_parallelism ? "%" + std::to_string(*job.array_parallelism) : ""))
      << sbatch_line("--ntasks=1")
      << sbatch_line("--output=" + output_pattern_folder(job.results_dir) + "/slurm-%A_%a.out")
      << sbatch_line("--open-mode=append")
      << sbatch_line("--signal=B:USR1@" + std::to_string(job.signal_seconds))
      << sbatch_line("--requeue");
    if (job.partition) s << sbatch_line("--partition=" + *job.partition);
    if (job.time) s << sbatch_line("--time=" + *job.time);
    if (job.gpus_per_task > 0) s << sbatch_line("--gpus-per-task=" + std::to_string(job.gpus_per_task));
    for (const std::string& extra : job.extra_sbatch) s << sbatch_line(extra);
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
