#include "model/tensor_parallel_driver.h"

#include <chrono>

#include "model/step_wire.h"

namespace pagellm {

TensorParallelDriver::TensorParallelDriver(Backend& backend, std::unique_ptr<Model> shard,
                                           std::shared_ptr<TcpGroup> group)
    : backend_(backend), shard_(std::move(shard)), group_(std::move(group)) {
  // Over NCCL a dead or stopped worker would leave rank 0 waiting inside a collective on the GPU; over
  // TCP the collectives themselves see the connection close or the deadline pass.
  if (backend_.device() != Device::kCpu) group_->watch_peers();
  const WorkerFrame beat{WorkerMessage::kHeartbeat, 0, 0};
  heartbeat_ = std::make_unique<PeriodicThread>(std::chrono::duration<double>(group_->timeout_s() / 4), [this, beat] {
    std::lock_guard<std::mutex> between_steps(connections_);
    for (int peer = 1; peer < group_->size(); ++peer) group_->send(peer, &beat, sizeof(beat), "a heartbeat");
    return true;
  });
}

TensorParallelDriver::~TensorParallelDriver() {
  heartbeat_.reset();
  group_->stop_watching();  // the workers' connections close as they stop
  const WorkerFrame stop{WorkerMessage::kStop, 0, 0};
  for (int peer = 1; peer < group_->size(); ++peer) group_->send(peer, &stop, sizeof(stop), "stop");
}

void TensorParallelDriver::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  std::lock_guard<std::mutex> no_heartbeat(connections_);
  const void* first = cache_identity(caches);
  const bool send_layout = first != layout_sent_for_;
  const CacheLayout layout = send_layout ? layout_of(caches) : CacheLayout{};
  const std::vector<uint8_t> message = encode_step(batch, backend_, send_layout ? &layout : nullptr);
  const WorkerFrame frame{WorkerMessage::kStep, 0, message.size()};
  for (int peer = 1; peer < group_->size(); ++peer) {
    group_->send(peer, &frame, sizeof(frame), "the step's inputs");
    group_->send(peer, message.data(), message.size(), "the step's inputs");
  }
  layout_sent_for_ = first;
  shard_->forward(batch, caches, logits);
}

}  // namespace pagellm
