#pragma once
// The `sweetspot` command line. Exit codes: 0 success, 1 a run finished with failed cells,
// 2 bad input (usage, matrix, database), 130 interrupted.
namespace sweetspot {

int cli_main(int argc, char** argv);

}  // namespace sweetspot
