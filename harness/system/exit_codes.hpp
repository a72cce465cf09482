#pragma once
// The exit codes of every sweetspot command, in one place (README: "Exit codes").
namespace sweetspot {

inline constexpr int kExitOk = 0;
// The command ran but what it measured or made failed: cells failed, timed out or were invalid,
// logits failed their check, the report's Python could not run.
inline constexpr int kExitFailed = 1;
// Bad input (a matrix, an option, a file): nothing was written or changed.
inline constexpr int kExitBadInput = 2;
// SIGINT or SIGTERM stopped a sweep; the completed cells are stored.
inline constexpr int kExitInterrupted = 130;

}  // namespace sweetspot
