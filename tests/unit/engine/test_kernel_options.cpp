// KernelOptions: the PAGELLM_CUDA_* switches an engine reads once (EngineConfig) and hands to its
// backends, which then choose their kernels from the fields alone.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_options.h"
#include "engine/engine_config.h"

namespace pagellm {
namespace {

// Sets the switches for one scope and puts back what was there.
class ScopedSwitches {
 public:
  explicit ScopedSwitches(const std::vector<std::pair<const char*, const char*>>& values) { set(values); }
  ScopedSwitches(std::initializer_list<std::pair<const char*, const char*>> values) {
    set({values.begin(), values.end()});
  }
  ~ScopedSwitches() {
    for (const auto& [name, old] : saved_) {
      if (old) setenv(name.c_str(), old->c_str(), 1);
      else unsetenv(name.c_str());
    }
  }
  ScopedSwitches(const ScopedSwitches&) = delete;
  ScopedSwitches& operator=(const ScopedSwitches&) = delete;

 private:
  void set(const std::vector<std::pair<const char*, const char*>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      setenv(name, value, 1);
    }
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

const char* const kAll[] = {"PAGELLM_CUDA_GRAPHS",         "PAGELLM_CUDA_GEMV",           "PAGELLM_CUDA_QUANT_GEMV",
                            "PAGELLM_CUDA_FP8_W8A8",       "PAGELLM_CUDA_DECODE_ATTENTION",
                            "PAGELLM_CUDA_PREFILL_ATTENTION", "PAGELLM_CUDA_DECODE_PARTITION_UNITS",
                            "PAGELLM_CUDA_GDN_CHUNKED",    "PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS",
                            "PAGELLM_CUDA_MOE_TILED_MIN_ROWS", "PAGELLM_CUDA_MOE_K_SEGMENTS"};

// Every field as "name=value", in declaration order: one comparison names each field that differs.
std::string fields(const KernelOptions& o) {
  return fmt::format(
      "graphs={} gemv={} quant_gemv={} fp8_w8a8={} decode_attention={} prefill_attention={} "
      "decode_partition_units={} gdn_chunked={} gdn_chunked_min_tokens={} moe_tiled_min_rows={} moe_k_segments={}",
      o.graphs, o.gemv, o.quant_gemv, o.fp8_w8a8, o.decode_attention, o.prefill_attention, o.decode_partition_units,
      o.gdn_chunked, o.gdn_chunked_min_tokens, o.moe_tiled_min_rows, o.moe_k_segments);
}

TEST(KernelOptions, EmptySwitchesGiveTheFastPaths) {
  std::vector<std::pair<const char*, const char*>> none;
  for (const char* name : kAll) none.push_back({name, ""});  // set but empty: not a switch value
  const ScopedSwitches empty(none);
  EXPECT_EQ(fields(KernelOptions::from_environment()),
            "graphs=true gemv=true quant_gemv=true fp8_w8a8=true decode_attention=true prefill_attention=true "
            "decode_partition_units=false gdn_chunked=true gdn_chunked_min_tokens=0 moe_tiled_min_rows=0 "
            "moe_k_segments=0");
}

TEST(KernelOptions, EachSwitchTurnsItsPathAndAnEngineConfigReadsThem) {
  const ScopedSwitches switches{{"PAGELLM_CUDA_GRAPHS", "0"},
                                 {"PAGELLM_CUDA_GEMV", "0"},
                                 {"PAGELLM_CUDA_QUANT_GEMV", "0"},
                                 {"PAGELLM_CUDA_FP8_W8A8", "0"},
                                 {"PAGELLM_CUDA_DECODE_ATTENTION", "0"},
                                 {"PAGELLM_CUDA_PREFILL_ATTENTION", "0"},
                                 {"PAGELLM_CUDA_DECODE_PARTITION_UNITS", "1"},
                                 {"PAGELLM_CUDA_GDN_CHUNKED", "0"},
                                 {"PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS", "7"},
                                 {"PAGELLM_CUDA_MOE_TILED_MIN_ROWS", "64"},
                                 {"PAGELLM_CUDA_MOE_K_SEGMENTS", "3"}};
  const EngineConfig config;  // reads them when made
  EXPECT_EQ(fields(config.kernel_options),
            "graphs=false gemv=false quant_gemv=false fp8_w8a8=false decode_attention=false prefill_attention=false "
            "decode_partition_units=true gdn_chunked=false gdn_chunked_min_tokens=7 moe_tiled_min_rows=64 "
            "moe_k_segments=3");
}

TEST(KernelOptions, OtherValuesLeaveTheDefaults) {
  const ScopedSwitches switches{{"PAGELLM_CUDA_GEMV", "1"},
                                 {"PAGELLM_CUDA_DECODE_PARTITION_UNITS", "0"},
                                 {"PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS", "-3"},
                                 {"PAGELLM_CUDA_MOE_TILED_MIN_ROWS", "0"}};
  const KernelOptions options = KernelOptions::from_environment();
  EXPECT_TRUE(options.gemv);
  EXPECT_FALSE(options.decode_partition_units);
  EXPECT_EQ(options.gdn_chunked_min_tokens, 0);
  EXPECT_EQ(options.moe_tiled_min_rows, 0);
  const ScopedSwitches words{{"PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS", "12x"}, {"PAGELLM_CUDA_MOE_TILED_MIN_ROWS", "2k"}};
  EXPECT_EQ(KernelOptions::from_environment().gdn_chunked_min_tokens, 0);
  EXPECT_EQ(KernelOptions::from_environment().moe_tiled_min_rows, 0);
}

// vLLM's --enforce-eager turns the decode graphs off on the command line of generate, serve and bench.
TEST(KernelOptions, EnforceEagerTurnsGraphsOff) {
  const ScopedSwitches graphs_on{{"PAGELLM_CUDA_GRAPHS", "1"}};
  for (const bool eager : {false, true}) {
    EngineConfig config;
    CLI::App app;
    add_engine_options(app, config);
    std::vector<std::string> args = {"--device", "cpu"};
    if (eager) args.push_back("--enforce-eager");
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
    EXPECT_EQ(config.kernel_options.graphs, !eager);
    EXPECT_TRUE(config.kernel_options.gemv);  // the flag touches the graphs alone
  }
}

// The CPU backend has one kernel per op: it keeps no options, and setting them changes nothing.
TEST(KernelOptions, CpuBackendIgnoresThem) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.has_value());
  KernelOptions off;
  off.gemv = false;
  (*cpu)->set_kernel_options(off);
  EXPECT_TRUE((*cpu)->kernel_options().gemv);
}

}  // namespace
}  // namespace pagellm
