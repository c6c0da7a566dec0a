// pagellm's version and the git commit it was built from. Only version.cpp sees the commit as a
// compile definition, so a new commit recompiles one file instead of every file of the build.
#pragma once

namespace pagellm {

const char* pagellm_version();     // "0.1.0"
const char* pagellm_git_commit();  // short hash, or "unknown" outside a git checkout

}  // namespace pagellm
