// Model: one forward over a packed StepBatch. Models never see requests or the scheduler.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tcp_group.h"
#include "io/model_config.h"
#include "model/step_batch.h"

namespace pagellm {

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual MemorySpec memory_spec() const = 0;
  // Dtype of activations, logits and KV cache (the checkpoint's dtype).
  DType activation_dtype() const { return config().dtype; }
  // False when forward() waits on the device mid-way (e.g. MoE routing read back on the host), so a
  // decode step cannot be captured as a CUDA graph.
  virtual bool is_graph_capturable() const { return true; }
  // Writes logits[R, vocab] (activation dtype) for the rows batch.logits_rows selects.
  virtual void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) = 0;
  // Records what `record` queues on `backend` (a forward() and the ops after it) as one graph to
  // replay; a model whose forward also queues work on backends of its own records their parts too.
  virtual std::unique_ptr<OpGraph> capture(Backend& backend, const std::function<void()>& record) {
    return backend.capture(record);
  }
};

// Loads a model folder (config.json + safetensors) onto `backend`. Unknown architectures are an
// error that lists the supported ones.
// `dtype` overrides config.json's activation dtype (--dtype); `quantization` is --quantization
// (io/quant_config.h apply_quantization_flag: "" keeps the checkpoint's); tp.size > 1 loads a
// TensorParallelModel (model/tensor_parallel_model.h) whose rank 0 runs on `backend`.
struct TensorParallelOptions {
  int size = 1;               // --tensor-parallel-size
  bool share_device = false;  // CUDA: every rank on rank 0's GPU (the multi-rank path tested on one card)
  std::string communicator = "auto";  // --tp-communicator: CUDA ranks' collectives (backend.h)
  // Ranks as processes (--nnodes): this process is rank 0 of that group, which load_model forms (the
  // other ranks run engine/tensor_parallel_worker.h) and returns a TensorParallelDriver over.
  std::optional<TcpGroupOptions> processes;
};
Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, Backend& backend,
                                            std::optional<DType> dtype = std::nullopt,
                                            const std::string& quantization = "", TensorParallelOptions tp = {});
std::vector<std::string> supported_architectures();

}  // namespace pagellm
