// The scheduling flags of generate, serve and bench land in EngineConfig under vLLM's names.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_config.h"

namespace pagellm {
namespace {

TEST(EngineFlags, PartialPrefillFlagsParse) {
  EngineConfig config;
  EXPECT_EQ(config.max_num_partial_prefills, 0);  // no limits by default
  EXPECT_EQ(config.max_long_partial_prefills, 0);
  CLI::App app;
  add_engine_options(app, config);
  std::vector<std::string> args = {"--max-num-partial-prefills", "4", "--max-long-partial-prefills", "1",
                                   "--long-prefill-token-threshold", "1024"};
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  EXPECT_EQ(config.max_num_partial_prefills, 4);
  EXPECT_EQ(config.max_long_partial_prefills, 1);
  EXPECT_EQ(config.long_prefill_token_threshold, 1024);
}

}  // namespace
}  // namespace pagellm
