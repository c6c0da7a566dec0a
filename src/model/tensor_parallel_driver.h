// TensorParallelDriver: rank 0 of a tensor-parallel group whose ranks are processes (--nnodes; vLLM's
// driver / worker split). The engine, scheduler, block pool and prefix cache live here only; each step
// the driver sends the step's inputs to every other rank (model/step_wire.h; engine/
// tensor_parallel_worker.h runs them), then runs its own shard, whose collectives meet theirs over
// the group's TCP connections (backend/cpu/tcp_communicator.h) on the CPU, over NCCL on GPUs. Each
// rank keeps a copy of the caches in its own memory, filled through the same block tables and slot
// mappings.
#pragma once

#include <memory>
#include <mutex>

#include "backend/tcp_group.h"
#include "core/periodic_thread.h"
#include "model/model.h"

namespace pagellm {

// The frames rank 0 sends a worker between steps' collectives. Heartbeats go out every quarter of
// --tp-timeout-s while no step is being sent or run, so a worker that hears nothing for
// --tp-timeout-s knows rank 0 hangs (or its host is gone) even while the server is idle.
enum class WorkerMessage : uint32_t { kStep = 1, kStop = 2, kHeartbeat = 3 };
struct WorkerFrame {
  WorkerMessage message = WorkerMessage::kStep;
  uint32_t reserved = 0;
  uint64_t bytes = 0;  // of the step message that follows
};

class TensorParallelDriver final : public Model {
 public:
  TensorParallelDriver(Backend& backend, std::unique_ptr<Model> shard, std::shared_ptr<TcpGroup> group);
  // Tells every worker to stop (they exit cleanly).
  ~TensorParallelDriver() override;

  const ModelConfig& config() const override { return shard_->config(); }
  MemorySpec memory_spec() const override { return shard_->memory_spec(); }  // each process pays for its own copy
  bool is_graph_capturable() const override { return false; }
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override;

 private:
  Backend& backend_;
  std::unique_ptr<Model> shard_;
  std::shared_ptr<TcpGroup> group_;
  const void* layout_sent_for_ = nullptr;  // the caches whose layout the workers have
  // Held while a step is sent and run (its collectives use the same connections) and while a
  // heartbeat is sent.
  std::mutex connections_;
  std::unique_ptr<PeriodicThread> heartbeat_;  // between steps, every quarter of the timeout
};

}  // namespace pagellm
