#include "bench/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

namespace pagellm::bench {

namespace {

Expected<double> parse_number(std::string_view text, std::string_view what) {
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) {
    return invalid_argument("[bench] bad number '{}' in {}", std::string(text), std::string(what));
  }
  return value;
}

LatencyStats summarize(const std::vector<double>& values_s, const std::vector<double>& percentiles) {
  constexpr double kMsPerS = 1000.0;
  LatencyStats stats;
  if (!values_s.empty()) {
    double n = static_cast<double>(values_s.size());
    double mean = std::accumulate(values_s.begin(), values_s.end(), 0.0) / n;
    double sq = 0.0;
    for (double v : values_s) sq += (v - mean) * (v - mean);
    stats.mean_ms = mean * kMsPerS;
    stats.std_ms = std::sqrt(sq / n) * kMsPerS;  // population std, like numpy.std
  }
  stats.median_ms = percentile(values_s, 50.0) * kMsPerS;
  for (double p : percentiles) stats.percentiles_ms.emplace_back(p, percentile(values_s, p) * kMsPerS);
  return stats;
}

// Token-bearing chunks per one-second window of the run; the busiest window's count.
double peak_chunks_per_s(const std::vector<RequestRecord>& records) {
  std::map<int64_t, int64_t> chunks_per_second;
  for (const RequestRecord& r : records) {
    if (!r.success) continue;
    double t = r.start_s + r.ttft_s;
    ++chunks_per_second[static_cast<int64_t>(t)];
    for (double gap : r.itl_s) {
      t += gap;
      ++chunks_per_second[static_cast<int64_t>(t)];
    }
  }
  int64_t peak = 0;
  for (const auto& [second, count] : chunks_per_second) peak = std::max(peak, count);
  return static_cast<double>(peak);
}

}  // namespace

Expected<GoodputSlo> parse_goodput(const std::vector<std::string>& items) {
  GoodputSlo slo;
  for (const std::string& item : items) {
    size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return invalid_argument("[bench] --goodput items look like ttft:MS, got '{}'", item);
    }
    std::string name = item.substr(0, colon);
    PAGELLM_ASSIGN_OR_RETURN(double ms, parse_number(std::string_view(item).substr(colon + 1), "--goodput"));
    if (ms < 0) return invalid_argument("[bench] --goodput {} must be ≥ 0 ms", name);
    if (name == "ttft") {
      slo.ttft_ms = ms;
    } else if (name == "tpot") {
      slo.tpot_ms = ms;
    } else if (name == "e2el") {
      slo.e2el_ms = ms;
    } else {
      return invalid_argument("[bench] --goodput knows ttft, tpot and e2el, got '{}'", name);
    }
  }
  return slo;
}

Expected<std::vector<double>> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    PAGELLM_ASSIGN_OR_RETURN(double p, parse_number(item, "--percentiles"));
    if (p <= 0.0 || p > 100.0) return invalid_argument("[bench] percentile {} is not in (0, 100]", item);
    out.push_back(p);
  }
  if (out.empty()) return invalid_argument("[bench] --percentiles is empty");
  return out;
}

std::string percentile_label(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, values.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

namespace {

std::vector<TurnTtft> ttft_by_turn(const std::vector<RequestRecord>& records) {
  std::map<int, std::vector<double>> ttfts_s;  // turn -> TTFTs of its completed requests
  for (const RequestRecord& r : records) {
    if (r.turn > 0 && r.success) ttfts_s[r.turn].push_back(r.ttft_s);
  }
  std::vector<TurnTtft> turns;
  for (const auto& [turn, values] : ttfts_s) {
    turns.push_back({turn, static_cast<int>(values.size()), percentile(values, 50.0) * 1000.0,
                     percentile(values, 99.0) * 1000.0});
  }
  return turns;
}

std::vector<ClassLatency> latency_by_input_class(const std::vector<RequestRecord>& records) {
  std::map<int, std::pair<std::vector<double>, std::vector<double>>, std::greater<>> by_class;  // TTFTs, TPOTs (s)
  for (const RequestRecord& r : records) {
    if (r.input_class == 0 || !r.success) continue;
    auto& [ttfts, tpots] = by_class[r.input_class];
    ttfts.push_back(r.ttft_s);
    if (r.output_tokens > 1) tpots.push_back((r.e2el_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
  }
  std::vector<ClassLatency> classes;
  for (const auto& [input_len, values] : by_class) {
    const auto& [ttfts, tpots] = values;
    classes.push_back({input_len, static_cast<int>(ttfts.size()), percentile(ttfts, 50.0) * 1000.0,
                       percentile(ttfts, 99.0) * 1000.0, percentile(tpots, 50.0) * 1000.0,
                       percentile(tpots, 99.0) * 1000.0});
  }
  return classes;
}

}  // namespace

BenchMetrics compute_metrics(const std::vector<RequestRecord>& records, double duration_s,
                             int peak_concurrency, const GoodputSlo& slo,
                             const std::vector<double>& percentiles) {
  BenchMetrics m;
  m.duration_s = duration_s;
  m.max_concurrent_requests = peak_concurrency;
  std::vector<double> ttfts, tpots, itls, e2els;
  int good = 0;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++m.failed;
      if (m.first_error.empty()) m.first_error = r.error;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_len;
    m.total_output_tokens += r.output_tokens;
    if (!r.output_tokens_from_usage) ++m.num_output_tokens_estimated;
    double tpot_s = 0.0;  // vLLM counts a one-token request as TPOT 0 for goodput
    if (r.output_tokens > 1) {
      tpot_s = (r.e2el_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1);
      tpots.push_back(tpot_s);
    }
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.e2el_s);
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    bool is_good = (!slo.ttft_ms || r.ttft_s * 1000.0 <= *slo.ttft_ms) &&
                   (!slo.tpot_ms || tpot_s * 1000.0 <= *slo.tpot_ms) &&
                   (!slo.e2el_ms || r.e2el_s * 1000.0 <= *slo.e2el_ms);
    if (is_good) ++good;
  }
  if (duration_s > 0.0) {
    m.request_throughput = m.completed / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    if (slo.is_set()) m.request_goodput = good / duration_s;
  } else if (slo.is_set()) {
    m.request_goodput = 0.0;
  }
  m.max_output_tokens_per_s = peak_chunks_per_s(records);
  m.ttft = summarize(ttfts, percentiles);
  m.tpot = summarize(tpots, percentiles);
  m.itl = summarize(itls, percentiles);
  m.e2el = summarize(e2els, percentiles);
  m.ttft_by_turn = ttft_by_turn(records);
  m.latency_by_input_class = latency_by_input_class(records);
  return m;
}

}  // namespace pagellm::bench
