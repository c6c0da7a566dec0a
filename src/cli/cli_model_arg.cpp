#include "cli/model_arg.h"

#include <cstdio>

#include "cli/commands.h"
#include "io/model_path.h"
#include "model/make_model.h"

namespace pagellm::cli {

std::string resolve_model_or_demo(const std::string& model_arg, const std::string& revision) {
  if (model_arg.empty()) {
    std::string dir = value_or_throw(ensure_demo_model());
    std::fprintf(stderr, "pagellm: no --model given, using the embedded demo model (random weights, so its text "
                         "is gibberish): %s\n", dir.c_str());
    return dir;
  }
  return value_or_throw(resolve_model_path(model_arg, revision));
}

}  // namespace pagellm::cli
