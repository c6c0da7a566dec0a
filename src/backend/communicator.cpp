#include "backend/communicator.h"

#include <algorithm>

#include "core/check.h"

namespace pagellm {

ShardRange shard_range(int64_t total, int rank, int size) {
  CHECK(size >= 1 && rank >= 0 && rank < size && total >= 0);
  const int64_t piece = (total + size - 1) / size;
  const int64_t begin = std::min(total, piece * rank);
  return {begin, std::min(total, begin + piece) - begin};
}

}  // namespace pagellm
