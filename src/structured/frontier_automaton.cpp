#include "structured/frontier_automaton.h"

#include <algorithm>

namespace pagellm::structured {

FrontierAutomaton::FrontierAutomaton(const Grammar& grammar) : stacks_(grammar) { stacks_.enable_interning(); }

FrontierAutomaton::State FrontierAutomaton::state_for_key(const std::vector<int32_t>& key) {
  int32_t frame = key.back();  // kRootParent or kBottomParent
  for (size_t i = key.size() - 1; i-- > 0;) frame = stacks_.push(key[i], frame);
  scratch_.clear();
  scratch_.tops.push_back(frame);
  return intern(scratch_);
}

FrontierAutomaton::State FrontierAutomaton::intern(Frontier& frontier) {
  std::sort(frontier.tops.begin(), frontier.tops.end());
  frontier.tops.erase(std::unique(frontier.tops.begin(), frontier.tops.end()), frontier.tops.end());
  std::vector<int32_t> key = frontier.tops;
  key.push_back(frontier.complete ? 1 : 0);
  key.push_back(frontier.reached_bottom ? 1 : 0);
  auto [it, inserted] = index_.emplace(std::move(key), static_cast<State>(states_.size()));
  if (inserted) {
    states_.push_back(Info{frontier.tops, frontier.complete, frontier.reached_bottom});
    next_.emplace_back();
    next_.back().fill(kUnknown);
  }
  return it->second;
}

void FrontierAutomaton::step(State from, uint8_t byte, State& to) {
  State known = next_[static_cast<size_t>(from)][byte];
  if (known == kUnknown) {
    const std::vector<int32_t> tops = states_[static_cast<size_t>(from)].tops;  // intern may grow states_
    stacks_.advance(tops, byte, scratch_);
    known = intern(scratch_);
    next_[static_cast<size_t>(from)][byte] = known;
  }
  to = known;
}

}  // namespace pagellm::structured
