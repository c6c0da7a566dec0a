// When each request is issued, as vLLM's `bench serve` does it: all at once for an infinite rate;
// otherwise gaps drawn from a gamma distribution with shape = burstiness and mean 1 / rate
// (burstiness 1 = Poisson arrivals; < 1 burstier; > 1 more uniform). The first request goes at 0.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace pagellm::bench {

// Seconds from the benchmark start at which request i is issued (non-decreasing).
Expected<std::vector<double>> make_arrival_offsets(int num_requests, double request_rate,
                                                   double burstiness, uint64_t seed);

}  // namespace pagellm::bench
