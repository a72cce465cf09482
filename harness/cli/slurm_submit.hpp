#pragma once
// `sweetspot submit`: one Slurm job array for a matrix. Task i runs `sweetspot run MATRIX --shard i/N`
// into a database on node-local disk (SQLite must not be written over NFS) and copies it to the
// results folder when it ends. Warned before its time limit, it stops the sweep cleanly (the cell
// in flight is abandoned, finished cells are kept), copies the database back and requeues itself;
// stopped by Slurm (preemption, which requeues it, or scancel) it stops and copies back. A task
// that starts again resumes from that copy.
#include <optional>
#include <string>
#include <vector>

namespace sweetspot {

struct SlurmJob {
    std::string sweetspot;      // absolute path of the binary the tasks run
    std::string matrix;         // absolute path of the matrix (readable from the compute nodes)
    std::string name;           // the matrix's name: the job's and the files'
    std::string results_dir;    // absolute: the batch script, the tasks' output and the shard databases
    int tasks = 1;              // array tasks, one shard each
    std::optional<int> array_parallelism;  // at most this many tasks at once (--array=...%K)
    std::optional<std::string> partition, time;
    int gpus_per_task = 0;
    int signal_seconds = 120;   // how long before the time limit Slurm warns a task (USR1)
    std::vector<std::string> only;          // --only filters passed to every task
    std::vector<std::string> overrides;     // --set overrides passed to every task
    std::vector<std::string> extra_sbatch;  // more #SBATCH options, as given
};

// The database task `shard` (1 .. tasks) writes in the results folder.
std::string shard_database(const SlurmJob& job, int shard);

// The batch script (bash with #SBATCH lines): the job's values only inside quoted words, each
// option one word to sbatch. Throws std::invalid_argument, naming the option, for a value that
// no script can hold safely: one with a control character (a line break would end its line and
// run the rest), or on an #SBATCH line one with the word sbatch reads as the start of a
// heterogeneous job's next part (hetjob, packjob), and a results folder with a backslash.
std::string slurm_batch_script(const SlurmJob& job);

// A word for a POSIX shell: single-quoted, with any ' inside written as '\''.
std::string shell_quote(const std::string& word);

}  // namespace sweetspot
