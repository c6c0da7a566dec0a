// FrontierAutomaton: the parse states of the per-suffix mask walks as a lazily built DFA.
// Frames are interned (equal stacks are one index), a frontier is interned as a state, and each
// (state, byte) step is computed once and then looked up. Inside a JSON string, for instance,
// almost every byte leads back to the same state, so walking the whole vocabulary for a new
// suffix costs a table lookup per trie edge instead of a stack expansion. The automaton
// belongs to one CompiledGrammar and is used under its lock.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "structured/parse_stacks.h"

namespace pagellm::structured {

class FrontierAutomaton {
 public:
  using State = int32_t;
  explicit FrontierAutomaton(const Grammar& grammar);

  // The state of the cut-off stack a suffix key describes (see CompiledGrammar::suffix_masks).
  State state_for_key(const std::vector<int32_t>& key);
  size_t num_states() const { return states_.size(); }

  // The TokenWalker's Stepper interface.
  void step(State from, uint8_t byte, State& to);
  bool can_step(State s) const { return !states_[static_cast<size_t>(s)].tops.empty(); }
  bool alive(State s) const {
    const Info& info = states_[static_cast<size_t>(s)];
    return !info.tops.empty() || info.complete || info.reached_bottom;
  }
  bool reached_bottom(State s) const { return states_[static_cast<size_t>(s)].reached_bottom; }
  size_t mark() const { return 0; }  // interned frames are kept: nothing to undo
  void truncate(size_t) {}

 private:
  struct Info {
    std::vector<int32_t> tops;  // sorted, unique interned frames
    bool complete = false;
    bool reached_bottom = false;
  };
  static constexpr State kUnknown = -1;

  State intern(Frontier& frontier);

  ParseStacks stacks_;
  std::vector<Info> states_;
  std::vector<std::array<State, 256>> next_;
  std::map<std::vector<int32_t>, State> index_;  // tops + flags -> state
  Frontier scratch_;
};

}  // namespace pagellm::structured
