// The small integer types shared by the cache and the scheduler.
#pragma once

#include <cstdint>

namespace pagellm {

using TokenId = int32_t;    // vocabulary index; vocabularies stay far below 2^31
using BlockId = int32_t;    // index of a KV block in [0, num_blocks)
using BlockHash = uint64_t; // xxHash64 chain value of a full block (see block_hash.h)
using RequestId = int64_t;  // assigned by the engine; unique among live requests

inline constexpr BlockId kNoBlock = -1;
// A token sampled by a step still running (async scheduling): its value reaches the host later.
inline constexpr TokenId kPlaceholderToken = -1;

}  // namespace pagellm
