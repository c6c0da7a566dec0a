// TcpGroup: the connections of a tensor-parallel group whose ranks are processes (one rank each, on
// one host or several; vLLM / torchrun's --nnodes, --node-rank, --master-addr, --master-port). A star:
// rank 0 listens on the master port and holds one TCP connection per other rank; every other rank
// holds one, to rank 0. The collectives (cpu/tcp_communicator.h) and rank 0's step messages
// (model/tensor_parallel_driver.h) travel over it.
//
// Start-up (open): each rank > 0 connects (retrying until rank 0 listens) and sends a hello with its
// rank, the group size and a fingerprint of its model and engine config; rank 0 accepts size - 1 of
// them and answers each: a rank whose fingerprint differs from rank 0's is refused, and the group
// fails to form on both sides with one line that says why. (NCCL's unique id would travel the same way.)
//
// Faults: every wait inside a step has a deadline (timeout_s); a peer that closed its connection (its
// process died or ended) or missed the deadline (it hangs) ends this process with a one-line error,
// so no rank waits forever for a dead one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/periodic_thread.h"
#include "core/status.h"

namespace pagellm {

struct TcpGroupOptions {
  int rank = 0, size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double timeout_s = 60.0;          // a step's waits (collectives) at most
  double startup_timeout_s = 600.0;  // forming the group and loading every shard at most
  uint64_t fingerprint = 0;          // model + engine config; every rank must send rank 0's
};

class TcpGroup {
 public:
  // Forms the group (rank 0 listens and accepts, the others connect): an error when it cannot form.
  static Expected<std::shared_ptr<TcpGroup>> open(const TcpGroupOptions& options);
  ~TcpGroup();
  TcpGroup(const TcpGroup&) = delete;
  TcpGroup& operator=(const TcpGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  double timeout_s() const { return options_.timeout_s; }

  // Exactly `bytes` bytes to / from `peer` (rank 0: any rank > 0; the others: rank 0 only). `what` names
  // the exchange in the error that ends the process when the peer is gone or misses the deadline;
  // timeout_s < 0 waits without a deadline (a worker waiting for rank 0's next step).
  void send(int peer, const void* data, size_t bytes, const char* what);
  void recv(int peer, void* data, size_t bytes, const char* what, double timeout_s);
  void recv(int peer, void* data, size_t bytes, const char* what) { recv(peer, data, bytes, what, timeout_s()); }

  // After loading: each rank > 0 reports ready; rank 0 waits (startup deadline) until all have.
  Status wait_until_all_loaded();

  // A group whose collectives do not travel over these connections (NCCL), where rank 0 may wait
  // inside a collective on the GPU for a rank that is gone:
  // - every other rank sends rank 0 a byte every quarter of the timeout from a thread of its own
  //   (start_heartbeats), which a slow step does not hold up but a stopped or hung process does;
  // - rank 0 runs a thread (watch_peers) that ends this process with the one-line error when another
  //   rank's connection closes (its process died) or nothing came from it within the timeout.
  // stop_watching() ends rank 0's thread (before it tells the others to stop, which closes their
  // connections); stop_heartbeats() a rank's.
  void watch_peers();
  void stop_watching();
  void start_heartbeats();
  void stop_heartbeats();

 private:
  explicit TcpGroup(const TcpGroupOptions& options);
  Status listen_and_accept();
  Status connect_to_rank0();
  int socket_of(int peer) const;
  [[noreturn]] void fail(int peer, const std::string& why) const;

  TcpGroupOptions options_;
  std::thread watchdog_;
  std::atomic<bool> watching_{false};
  std::unique_ptr<PeriodicThread> heartbeat_;
  std::vector<int> sockets_;  // rank 0: [size] (its own entry -1); others: [1], the connection to rank 0
};

// FNV-1a over `text`: a fingerprint that is the same in every build and process.
uint64_t fingerprint_of(const std::string& text);

}  // namespace pagellm
