// MTP speculative decoding ({"method": "mtp"}) on the CPU over the transformers hybrid fixtures in
// f32, each given an MTP head (mtp.*) here: the head's logits equal a straightforward f64 reference
// of vLLM's qwen3_5_mtp math; greedy output with MTP is the plain run's, bit for bit, alone and
// batched, with chunked prefill, prefix hits and (tokens only) preemption; acceptance is counted.
// Heads:
//   random    fc and norms random, the layer a copy of the target's full-attention layer
//   identity  fc passes the hidden half through and the layer adds nothing, so the head predicts what
//             the target predicted at the position before: kept wherever the target repeats a token
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "greedy_outcome.h"
#include "io/safetensors.h"
#include "model/make_model.h"
#include "model/mtp_model.h"

namespace pagellm {
namespace {

const fs::path kFixtures = golden_fixture_root("hybrid");
const std::vector<std::string> kFixtureNames = {"qwen3_5_text_tiny_f32", "qwen3_next_tiny_moe_f32"};

enum class Head { kRandom, kIdentity };

std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A copy of fixture `name` whose checkpoint also holds an MTP head; its layer copies the target's
// last (full-attention) layer.
fs::path fixture_with_mtp(const std::string& name, Head head) {
  const fs::path src = kFixtures / name;
  const fs::path dir = fs::temp_directory_path() /
                       fmt::format("pagellm_mtp_{}_{}_{}", name, head == Head::kRandom ? "random" : "identity", ::getpid());
  fs::create_directories(dir);
  for (const char* file : {"config.json", "generation_config.json"})
    fs::copy_file(src / file, dir / file, fs::copy_options::overwrite_existing);
  Expected<Checkpoint> checkpoint = Checkpoint::open_dir(src.string());
  EXPECT_TRUE(checkpoint.has_value());
  const int64_t h = nlohmann::json::parse(std::ifstream(src / "config.json"))["hidden_size"].get<int64_t>();
  SafetensorsWriter writer;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * uniform(rng);
    return v;
  };
  const std::string last_layer = "model.layers.3.";
  for (const std::string& tensor : checkpoint->names()) {
    const TensorInfo* info = checkpoint->find(tensor);
    std::vector<uint8_t> bytes(static_cast<const uint8_t*>(info->data),
                               static_cast<const uint8_t*>(info->data) + info->nbytes);
    writer.add(tensor, info->dtype, info->shape, bytes);
    if (tensor.rfind(last_layer, 0) != 0) continue;
    const std::string rest = tensor.substr(last_layer.size());
    const bool output_projection = rest.find("o_proj") != std::string::npos || rest.find("down_proj") != std::string::npos;
    if (head == Head::kIdentity && output_projection) std::fill(bytes.begin(), bytes.end(), 0);
    writer.add("mtp.layers.0." + rest, info->dtype, info->shape, std::move(bytes));
  }
  std::vector<float> fc(static_cast<size_t>(2 * h * h), 0.0f);  // [H, 2H]
  if (head == Head::kIdentity) {
    for (int64_t i = 0; i < h; ++i) fc[static_cast<size_t>(i * 2 * h + h + i)] = 1.0f;
  } else {
    fc = random(fc.size(), 0.15f);
  }
  writer.add("mtp.fc.weight", DType::kF32, {h, 2 * h}, f32_bytes(fc));
  for (const char* norm : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
    writer.add(norm, DType::kF32, {h}, f32_bytes(head == Head::kIdentity ? std::vector<float>(h, 0.0f) : random(h, 0.1f)));
  EXPECT_TRUE(writer.write((dir / "model.safetensors").string()).is_ok());
  return dir;
}

SpeculativeConfig mtp_config(int k) {
  Expected<SpeculativeConfig> parsed =
      parse_speculative_config(fmt::format(R"({{"method": "mtp", "num_speculative_tokens": {}}})", k));
  EXPECT_TRUE(parsed.has_value());
  return parsed.has_value() ? *parsed : SpeculativeConfig{};
}

// ---- the head's logits against an f64 reference ----

using Vec = std::vector<double>;

struct HostWeights {
  const Checkpoint& checkpoint;
  Vec get(const std::string& name) const {
    const TensorInfo* info = checkpoint.find(name);
    EXPECT_TRUE(info != nullptr && info->dtype == DType::kF32) << name;
    if (info == nullptr) return {};
    std::vector<float> f(info->nbytes / sizeof(float));
    std::memcpy(f.data(), info->data, info->nbytes);
    return Vec(f.begin(), f.end());
  }
};

// y[rows] = W[rows, cols] x[cols]
Vec matvec(const Vec& w, const Vec& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  Vec y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  return y;
}

// (1 + w) * x / rms(x)
Vec rms_norm(const Vec& x, const Vec& w, double eps) {
  double sum_sq = 0.0;
  for (double v : x) sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (1.0 + w[i]);
  return y;
}

// The head at every position p of a sequence: tokens[p] = t_(p+1), hidden[p] = h_p; logits [T][V].
std::vector<Vec> reference_mtp_logits(const HostWeights& w, const nlohmann::json& config,
                                      const std::vector<TokenId>& tokens, const std::vector<Vec>& hidden) {
  const auto h = config["hidden_size"].get<size_t>(), hd = config["head_dim"].get<size_t>(),
             nh = config["num_attention_heads"].get<size_t>(), nkv = config["num_key_value_heads"].get<size_t>();
  const double eps = config["rms_norm_eps"].get<double>(), theta = config["rope_parameters"]["rope_theta"].get<double>();
  const auto rot = static_cast<size_t>(static_cast<double>(hd) * config["partial_rotary_factor"].get<double>());
  const Vec embed = w.get("model.embed_tokens.weight"), fc = w.get("mtp.fc.weight");
  const std::string l = "mtp.layers.0.";
  const Vec wq = w.get(l + "self_attn.q_proj.weight"), wk = w.get(l + "self_attn.k_proj.weight"),
            wv = w.get(l + "self_attn.v_proj.weight"), wo = w.get(l + "self_attn.o_proj.weight"),
            q_norm = w.get(l + "self_attn.q_norm.weight"), k_norm = w.get(l + "self_attn.k_norm.weight"),
            gate = w.get(l + "mlp.gate_proj.weight"), up = w.get(l + "mlp.up_proj.weight"),
            down = w.get(l + "mlp.down_proj.weight");
  auto rope = [&](double* x, size_t pos) {  // rotate-half over the first `rot` dims
    for (size_t i = 0; i < rot / 2; ++i) {
      const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
      const double a = x[i], b = x[i + rot / 2];
      x[i] = a * std::cos(angle) - b * std::sin(angle);
      x[i + rot / 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  };
  const size_t n = tokens.size();
  std::vector<Vec> residual(n), queries(n), gates(n), keys(n), values(n);
  for (size_t p = 0; p < n; ++p) {
    const Vec e(embed.begin() + static_cast<ptrdiff_t>(tokens[p] * h), embed.begin() + static_cast<ptrdiff_t>((tokens[p] + 1) * h));
    Vec both = rms_norm(e, w.get("mtp.pre_fc_norm_embedding.weight"), eps);
    const Vec hn = rms_norm(hidden[p], w.get("mtp.pre_fc_norm_hidden.weight"), eps);
    both.insert(both.end(), hn.begin(), hn.end());
    residual[p] = matvec(fc, both);
    const Vec a = rms_norm(residual[p], w.get(l + "input_layernorm.weight"), eps);
    const Vec qg = matvec(wq, a);  // per head: q (hd) | gate (hd)
    keys[p] = matvec(wk, a);
    values[p] = matvec(wv, a);
    queries[p].resize(nh * hd);
    gates[p].resize(nh * hd);
    for (size_t head = 0; head < nh; ++head) {
      const Vec q(qg.begin() + static_cast<ptrdiff_t>(2 * head * hd), qg.begin() + static_cast<ptrdiff_t>((2 * head + 1) * hd));
      const Vec qn = rms_norm(q, q_norm, eps);
      std::copy(qn.begin(), qn.end(), queries[p].begin() + static_cast<ptrdiff_t>(head * hd));
      std::copy(qg.begin() + static_cast<ptrdiff_t>((2 * head + 1) * hd), qg.begin() + static_cast<ptrdiff_t>((2 * head + 2) * hd),
                gates[p].begin() + static_cast<ptrdiff_t>(head * hd));
      rope(queries[p].data() + head * hd, p);
    }
    for (size_t kv = 0; kv < nkv; ++kv) {
      const Vec k(keys[p].begin() + static_cast<ptrdiff_t>(kv * hd), keys[p].begin() + static_cast<ptrdiff_t>((kv + 1) * hd));
      const Vec kn = rms_norm(k, k_norm, eps);
      std::copy(kn.begin(), kn.end(), keys[p].begin() + static_cast<ptrdiff_t>(kv * hd));
      rope(keys[p].data() + kv * hd, p);
    }
  }
  std::vector<Vec> logits(n);
  for (size_t p = 0; p < n; ++p) {
    Vec attn(nh * hd, 0.0);
    for (size_t head = 0; head < nh; ++head) {
      const size_t kv = head / (nh / nkv);
      Vec scores(p + 1);
      for (size_t j = 0; j <= p; ++j) {
        double dot = 0.0;
        for (size_t d = 0; d < hd; ++d) dot += queries[p][head * hd + d] * keys[j][kv * hd + d];
        scores[j] = dot / std::sqrt(static_cast<double>(hd));
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double total = 0.0;
      for (double& s : scores) total += s = std::exp(s - top);
      for (size_t d = 0; d < hd; ++d) {
        double o = 0.0;
        for (size_t j = 0; j <= p; ++j) o += scores[j] / total * values[j][kv * hd + d];
        attn[head * hd + d] = o / (1.0 + std::exp(-gates[p][head * hd + d]));
      }
    }
    Vec x = residual[p];
    const Vec o = matvec(wo, attn);
    for (size_t i = 0; i < h; ++i) x[i] += o[i];
    const Vec b = rms_norm(x, w.get(l + "post_attention_layernorm.weight"), eps);
    const Vec g = matvec(gate, b), u = matvec(up, b);
    Vec act(g.size());
    for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const Vec mlp = matvec(down, act);
    for (size_t i = 0; i < h; ++i) x[i] += mlp[i];
    logits[p] = matvec(embed, rms_norm(x, w.get("mtp.norm.weight"), eps));  // tied head
  }
  return logits;
}

// Host tensors of one MTP forward over a fresh cache: T token rows at positions 0 .. T-1, one block.
struct HeadStep {
  Tensor token_ids, positions, cu_seqlens_q, seq_lens_k, block_tables, slot_mapping, logits_rows, hidden_rows;
  StepBatch batch;
  explicit HeadStep(const std::vector<TokenId>& tokens) {
    const auto n = static_cast<int64_t>(tokens.size());
    token_ids = Tensor::cpu({n}, DType::kI32);
    positions = Tensor::cpu({n}, DType::kI32);
    slot_mapping = Tensor::cpu({n}, DType::kI64);
    logits_rows = Tensor::cpu({n}, DType::kI32);
    hidden_rows = Tensor::cpu({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      token_ids.ptr<int32_t>()[i] = tokens[static_cast<size_t>(i)];
      positions.ptr<int32_t>()[i] = logits_rows.ptr<int32_t>()[i] = hidden_rows.ptr<int32_t>()[i] = static_cast<int32_t>(i);
      slot_mapping.ptr<int64_t>()[i] = i;
    }
    cu_seqlens_q = Tensor::cpu({2}, DType::kI32);
    cu_seqlens_q.ptr<int32_t>()[1] = static_cast<int32_t>(n);
    seq_lens_k = Tensor::cpu({1}, DType::kI32);
    seq_lens_k.ptr<int32_t>()[0] = static_cast<int32_t>(n);
    block_tables = Tensor::cpu({1, 1}, DType::kI32);
    batch.num_tokens = n;
    batch.num_seqs = 1;
    batch.max_seqlen_q = batch.max_seqlen_k = static_cast<int32_t>(n);
    batch.token_ids = token_ids.view();
    batch.positions = positions.view();
    batch.cu_seqlens_q = cu_seqlens_q.view();
    batch.seq_lens_k = seq_lens_k.view();
    batch.block_tables = block_tables.view();
    batch.slot_mapping = slot_mapping.view();
    batch.logits_rows = logits_rows.view();
  }
};

TEST(Mtp, HeadLogitsEqualAnF64Reference) {
  const fs::path dir = fixture_with_mtp("qwen3_5_text_tiny_f32", Head::kRandom);
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto target = load_model(dir.string(), **backend);
  ASSERT_TRUE(target.has_value()) << target.status().message();
  auto head = load_mtp_model(**target, dir.string(), **backend);
  ASSERT_TRUE(head.has_value()) << head.status().message();
  const ModelConfig& mc = (*target)->config();
  const std::vector<TokenId> prompt = {5, 77, 300, 12, 12, 499, 8, 140, 33, 2, 256};
  // The target's prompt forward (the last one: one output token) leaves every row's hidden state.
  auto out = generate_sequence(**target, **backend, prompt, greedy_options(1));
  ASSERT_TRUE(out.has_value());
  const TensorView target_hidden = (*head)->target_hidden_states(static_cast<int64_t>(prompt.size()));  // f32, host
  ASSERT_EQ(target_hidden.size(0), static_cast<int64_t>(prompt.size()));
  const auto h = static_cast<size_t>(mc.hidden_size);
  std::vector<Vec> hidden(prompt.size());
  for (size_t p = 0; p < prompt.size(); ++p)
    hidden[p] = Vec(target_hidden.ptr<float>() + p * h, target_hidden.ptr<float>() + (p + 1) * h);
  // The shared head over the last row's hidden state gives the target's own next-token logits.
  Expected<Checkpoint> checkpoint = Checkpoint::open_dir(dir.string());
  ASSERT_TRUE(checkpoint.has_value());
  const HostWeights weights{*checkpoint};
  const Vec last_logits = matvec(weights.get("model.embed_tokens.weight"), hidden.back());
  for (size_t v = 0; v < last_logits.size(); ++v) ASSERT_NEAR(last_logits[v], out->prompt_logits[v], 1e-4) << v;

  // Pairs (t_(p+1), h_p): the prompt shifted by one, then the sampled token.
  std::vector<TokenId> shifted(prompt.begin() + 1, prompt.end());
  shifted.push_back(out->token_ids.at(0));
  HeadStep step(shifted);
  const MemorySpec spec = (*head)->memory_spec();
  ASSERT_EQ(spec.num_attention_layers, 1);
  const auto n = static_cast<int64_t>(shifted.size());
  Tensor k = (*backend)->alloc({1, n, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
  Tensor v = (*backend)->alloc({1, n, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
  CacheViews caches;
  caches.attention_layers.push_back({k.view(), v.view(), 0});
  Tensor logits = (*backend)->alloc({n, mc.vocab_size}, mc.dtype);
  (*head)->set_hidden_input(target_hidden, step.hidden_rows.view());
  (*head)->forward(step.batch, caches, logits.view());
  const std::vector<Vec> want =
      reference_mtp_logits(weights, nlohmann::json::parse(std::ifstream(dir / "config.json")), shifted, hidden);
  double worst = 0.0;
  for (int64_t p = 0; p < n; ++p)
    for (int64_t t = 0; t < mc.vocab_size; ++t)
      worst = std::max(worst, std::abs(logits.ptr<float>()[p * mc.vocab_size + t] - want[static_cast<size_t>(p)][static_cast<size_t>(t)]));
  EXPECT_LT(worst, 2e-4) << "largest |logit - reference| over " << n << " positions";
  fs::remove_all(dir);
}

using Outcome = GreedyOutcome;


void expect_counted(const EngineMetrics& m, const std::string& what) {
  EXPECT_GT(m.spec_decode_num_drafts, 0u) << what;
  EXPECT_GE(m.spec_decode_num_draft_tokens, m.spec_decode_num_drafts) << what;
  EXPECT_LE(m.spec_decode_num_accepted_tokens, m.spec_decode_num_draft_tokens) << what;
  EXPECT_EQ(std::accumulate(m.spec_decode_accepted_per_position.begin(), m.spec_decode_accepted_per_position.end(),
                            uint64_t{0}),
            m.spec_decode_num_accepted_tokens) << what;
}

class MtpFixtures : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Hybrid, MtpFixtures, ::testing::ValuesIn(kFixtureNames),
                         [](const auto& info) { return info.param; });

TEST_P(MtpFixtures, GreedyEqualsThePlainRunAloneAndBatchedWithTinyChunks) {
  const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / GetParam());
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenCase& c : cases) prompts.push_back(c.prompt);
  for (const Head head : {Head::kRandom, Head::kIdentity}) {
    const fs::path dir = fixture_with_mtp(GetParam(), head);
    for (const bool batched : {false, true}) {
      EngineConfig config;
      config.max_num_batched_tokens = batched ? 8 : 2048;  // batched: chunked prefill beside speculative rows
      const Outcome plain = run_greedy(dir, config, prompts, 16, batched);
      for (size_t i = 0; i < cases.size(); ++i)
        EXPECT_EQ(cases[i].checked(plain.outs[i].token_ids), cases[i].checked(cases[i].greedy)) << "prompt " << i;
      for (const int k : {1, 3}) {
        config.speculative = mtp_config(k);
        const std::string what = fmt::format("{} head, k {}{}", head == Head::kRandom ? "random" : "identity", k,
                                             batched ? ", batched" : ", alone");
        const Outcome spec = run_greedy(dir, config, prompts, 16, batched);
        expect_same_outputs(spec, plain, what);
        expect_counted(spec.metrics, what);
      }
    }
    fs::remove_all(dir);
  }
}

// The identity head drafts the target's last prediction again, which a model that repeats itself
// keeps: prompts that repeat tokens, twice (prefix hits), then under preemption (tokens only: a
// preempted request computes its outputs again as a prompt, in the chunked form).
TEST_P(MtpFixtures, KeptDraftsPrefixHitsAndPreemption) {
  const fs::path dir = fixture_with_mtp(GetParam(), Head::kIdentity);
  std::vector<std::vector<TokenId>> prompts;
  std::mt19937 rng(23);
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> prompt(static_cast<size_t>(70 + rng() % 60));
    for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = static_cast<TokenId>(t % 3 == 0 ? rng() % 512 : prompt[t - 1]);
    prompts.push_back(prompt);
  }
  EngineConfig roomy;
  roomy.block_size = 16;
  roomy.max_model_len = 256;
  const Outcome plain = run_greedy(dir, roomy, prompts, 60, true, /*waves=*/2);
  roomy.speculative = mtp_config(3);
  const Outcome spec = run_greedy(dir, roomy, prompts, 60, true, 2);
  expect_same_outputs(spec, plain, "identity head");
  expect_counted(spec.metrics, "identity head");
  EXPECT_GT(spec.metrics.prefix_cache_hit_tokens, 0u);
  EXPECT_GT(spec.metrics.spec_decode_num_accepted_tokens, 0u);
  // Short prompts growing long, three requests at a time with KV (target 8 KiB + head 8 KiB a block)
  // for about two.
  for (auto& prompt : prompts) prompt.resize(20);
  EngineConfig small = roomy;
  small.speculative = {};
  const Outcome plain_short = run_greedy(dir, small, prompts, 200, true);
  small.speculative = mtp_config(3);
  small.max_num_seqs = 3;
  small.max_num_batched_tokens = 64;
  small.enable_prefix_caching = false;
  small.kv_cache_memory_bytes = (3 * 4 + 1) * 3 * (1536 + 4096) + 28 * 2 * 8192 + 4096;
  const Outcome preempted = run_greedy(dir, small, prompts, 200, true);
  expect_same_outputs(preempted, plain_short, "identity head, small budget", 1e-4);
  EXPECT_GT(preempted.metrics.preemptions, 0u);
  fs::remove_all(dir);
}

// The CUDA runner: the target's decode rows replay graphs that keep the final hidden states the
// head reads; the tokens are the plain CUDA run's.
TEST_P(MtpFixtures, CudaGreedyTokensEqualThePlainRun) {
  SKIP_UNLESS_BACKEND("cuda");
  const std::vector<GoldenCase> cases = read_golden_cases(kFixtures / GetParam());
  std::vector<std::vector<TokenId>> prompts;
  for (const GoldenCase& c : cases) prompts.push_back(c.prompt);
  for (const Head head : {Head::kRandom, Head::kIdentity}) {
    const fs::path dir = fixture_with_mtp(GetParam(), head);
    EngineConfig config;
    config.async_scheduling = 1;
    config.max_num_batched_tokens = 16;
    const Outcome plain = run_greedy(dir, config, prompts, 16, true, 1, "cuda");
    config.speculative = mtp_config(3);
    const Outcome spec = run_greedy(dir, config, prompts, 16, true, 1, "cuda");
    ASSERT_EQ(spec.outs.size(), plain.outs.size());
    for (size_t i = 0; i < plain.outs.size(); ++i)
      EXPECT_EQ(spec.outs[i].token_ids, plain.outs[i].token_ids) << "prompt " << i;
    expect_counted(spec.metrics, head == Head::kRandom ? "random head" : "identity head");
    fs::remove_all(dir);
  }
}

TEST(Mtp, RefusedWithoutAHead) {
  EngineConfig config;
  config.speculative = mtp_config(2);
  config.model_dir = (kFixtures / "qwen3_5_text_tiny_f32").string();
  config.device = "cpu";
  config.kv_cache_memory_bytes = 64 << 20;
  auto no_head = LLM::load(config);
  ASSERT_FALSE(no_head.has_value());
  EXPECT_NE(no_head.status().message().find("no mtp.* weights"), std::string::npos) << no_head.status().message();
  config.model_dir = (golden_fixture_root("qwen3") / "tied_gqa2_hd32_f32").string();
  auto dense = LLM::load(config);
  ASSERT_FALSE(dense.has_value());
  EXPECT_NE(dense.status().message().find("has no MTP head"), std::string::npos) << dense.status().message();
}

TEST(Mtp, MakeModelWritesTheHeadWhenAsked) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("pagellm_mtp_make_{}", ::getpid());
  MakeModelOptions options;
  options.preset = "qwen3.5-micro";
  options.out_dir = dir.string();
  options.dtype = DType::kF32;
  options.mtp = true;
  ASSERT_TRUE(make_model(options).is_ok());
  Expected<Checkpoint> checkpoint = Checkpoint::open_dir(dir.string());
  ASSERT_TRUE(checkpoint.has_value());
  EXPECT_NE(checkpoint->find("mtp.fc.weight"), nullptr);
  EXPECT_NE(checkpoint->find("mtp.layers.0.self_attn.q_proj.weight"), nullptr);
  EngineConfig config;
  config.speculative = mtp_config(2);
  auto llm = make_test_llm(dir, config);
  ASSERT_TRUE(llm);
  const auto outs = llm->generate({greedy_request({1, 2, 3, 4, 5}, 12)});
  ASSERT_TRUE(outs[0].error.is_ok()) << outs[0].error.message();
  EXPECT_EQ(outs[0].token_ids.size(), 12u);
  EXPECT_GT(llm->engine().metrics().spec_decode_num_drafts, 0u);
  options.preset = "qwen3-micro";
  const Status dense = make_model(options);
  EXPECT_FALSE(dense.is_ok());
  EXPECT_NE(dense.message().find("--mtp"), std::string::npos) << dense.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagellm
