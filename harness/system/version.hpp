#pragma once
// Which sweetspot this is: stored with every run and printed by --version.
namespace sweetspot {

inline constexpr const char* kVersion = SWEETSPOT_VERSION;
// `git describe --dirty` of the source tree at build time ("unknown" outside a git checkout).
const char* git_revision();

}  // namespace sweetspot
