#include "core/version.h"

namespace pagellm {

const char* pagellm_version() { return PAGELLM_VERSION; }
const char* pagellm_git_commit() { return PAGELLM_GIT_COMMIT; }

}  // namespace pagellm
