#include "bench/arrivals.h"

#include <cmath>
#include <random>

namespace pagellm::bench {

Expected<std::vector<double>> make_arrival_offsets(int num_requests, double request_rate,
                                                   double burstiness, uint64_t seed) {
  if (!(request_rate > 0.0)) return invalid_argument("[bench] --request-rate must be > 0 or inf");
  if (!(burstiness > 0.0)) return invalid_argument("[bench] --burstiness must be > 0");
  std::vector<double> offsets_s(num_requests, 0.0);
  if (std::isinf(request_rate)) return offsets_s;
  // Its own stream, so the arrival pattern does not change when the dataset draws more numbers.
  std::mt19937_64 rng(seed ^ 0x5eedA771u);
  std::gamma_distribution<double> gap_s(burstiness, 1.0 / (request_rate * burstiness));
  for (int i = 1; i < num_requests; ++i) offsets_s[i] = offsets_s[i - 1] + gap_s(rng);
  return offsets_s;
}

}  // namespace pagellm::bench
