#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "model/make_model.h"

namespace pagellm::cli {

void add_make_model_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("make-model", "Write a Hugging Face checkpoint with deterministic random weights");
  auto options = std::make_shared<MakeModelOptions>();
  auto dtype_name_arg = std::make_shared<std::string>("bf16");
  auto no_tokenizer = std::make_shared<bool>(false);
  cmd->add_option("--preset", options->preset, fmt::format("one of: {}", fmt::join(make_model_presets(), ", ")))
      ->capture_default_str();
  cmd->add_option("--out", options->out_dir, "output folder")->required();
  cmd->add_option("--seed", options->seed, "same seed => byte-identical files")->capture_default_str();
  cmd->add_option("--dtype", *dtype_name_arg, "bf16, f16 or f32")->capture_default_str();
  cmd->add_option("--weight-std", options->weight_std, "std of the random matrix entries")->capture_default_str();
  cmd->add_option("--tokenizer", options->tokenizer_dir, "folder with tokenizer.json to copy (default: assets/tokenizers/<the preset's family>)");
  cmd->add_flag("--no-tokenizer", *no_tokenizer, "write no tokenizer files");
  cmd->add_option("--quantize", options->quantize,
                  "write the projections quantized: fp8 (e4m3, 128x128 blocks), awq (4-bit, zero points) or gptq "
                  "(4-bit symmetric), with the matching quantization_config");
  cmd->add_option("--group-size", options->group_size, "awq / gptq group size (default 128, or 64 / 32 when 128 "
                                                       "does not divide the preset's widths)");
  cmd->add_flag("--mtp", options->mtp, "hybrid presets: write the multi-token-prediction head (mtp.*) too");
  cmd->add_option("--num-layers", options->num_layers,
                  "decoder layers (default: the preset's): a cut-down model of the same layer shapes, for "
                  "kernel measurements");
  cmd->callback([options, dtype_name_arg, no_tokenizer] {
    if (!parse_dtype(*dtype_name_arg, &options->dtype))
      throw CommandError(fmt::format("[make-model] unknown dtype '{}': bf16, f16 or f32", *dtype_name_arg));
    if (*no_tokenizer) {
      options->tokenizer_dir.clear();
    } else if (options->tokenizer_dir.empty() && !default_tokenizer_assets_dir().empty() &&
               !preset_tokenizer(options->preset).empty()) {
      options->tokenizer_dir =
          (std::filesystem::path(default_tokenizer_assets_dir()) / preset_tokenizer(options->preset)).string();
    }
    throw_if_error(make_model(*options));
    const std::string layers = options->num_layers > 0 ? fmt::format(", {} layers", options->num_layers) : "";
    std::printf("wrote %s (preset %s%s, seed %llu, %s%s%s, random weights)\n", options->out_dir.c_str(),
                options->preset.c_str(), layers.c_str(), static_cast<unsigned long long>(options->seed),
                std::string(dtype_name(options->dtype)).c_str(), options->quantize.empty() ? "" : ", quantized ",
                options->quantize.c_str());
  });
}

}  // namespace pagellm::cli
