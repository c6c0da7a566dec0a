#include "backend/tcp_group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/logging.h"

namespace pagellm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x50544750;  // "PGTP"
constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kLoadedMagic = 0x44414f4c;  // "LOAD"

struct Hello {
  uint32_t magic = kHelloMagic, version = kProtocolVersion;
  int32_t rank = 0, size = 0;
  uint64_t fingerprint = 0;
};

// Rank 0's answer to a hello: ok, or the reason the rank is refused (message_bytes of text follow).
struct Verdict {
  uint32_t ok = 0, message_bytes = 0;
};

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1000)));
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // collectives are small and latency-bound
}

// Waits for `events` on fd until the deadline (none when unbounded): true when ready.
bool wait_ready(int fd, short events, bool bounded, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int ms = bounded ? milliseconds_until(deadline) : 1000;
    const int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
    if (bounded && Clock::now() >= deadline) return false;
  }
}

// Start-up I/O (hellos, verdicts): false on EOF, error or the deadline.
bool send_all(int fd, const void* data, size_t bytes, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLOUT, true, deadline)) return false;
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t bytes, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLIN, true, deadline)) return false;
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

Expected<sockaddr_in> resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    return invalid_argument("[tp] --master-addr '{}' does not resolve to an IPv4 address", host);
  sockaddr_in address = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  freeaddrinfo(found);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

}  // namespace

uint64_t fingerprint_of(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

TcpGroup::TcpGroup(const TcpGroupOptions& options) : options_(options) {}

TcpGroup::~TcpGroup() {
  stop_watching();
  stop_heartbeats();
  for (int fd : sockets_)
    if (fd >= 0) ::close(fd);
}

Expected<std::shared_ptr<TcpGroup>> TcpGroup::open(const TcpGroupOptions& options) {
  if (options.size < 2 || options.rank < 0 || options.rank >= options.size)
    return invalid_argument("[tp] rank {} of a group of {}", options.rank, options.size);
  if (options.master_port < 1 || options.master_port > 65535)
    return invalid_argument("[tp] --master-port must be in [1, 65535], got {}", options.master_port);
  if (!(options.timeout_s > 0))
    return invalid_argument("[tp] --tp-timeout-s must be > 0, got {}", options.timeout_s);
  std::shared_ptr<TcpGroup> group(new TcpGroup(options));
  PAGELLM_RETURN_IF_ERROR(options.rank == 0 ? group->listen_and_accept() : group->connect_to_rank0());
  return group;
}

Status TcpGroup::listen_and_accept() {
  const int port = options_.master_port, size = options_.size;
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) return internal_error("[tp] socket(): {}", std::strerror(errno));
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);  // the other nodes reach rank 0 at --master-addr
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(listener, size) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listener);
    return invalid_argument("[tp] rank 0 cannot listen on --master-port {}: {}", port, why);
  }
  LOG_INFO("[tp] rank 0 waits for {} more rank(s) on port {}", size - 1, port);
  sockets_.assign(static_cast<size_t>(size), -1);
  const Clock::time_point deadline = after(options_.startup_timeout_s);
  Status status = Status::ok();
  for (int joined = 0; joined < size - 1 && status.is_ok();) {
    if (!wait_ready(listener, POLLIN, true, deadline)) {
      status = invalid_argument("[tp] {} of {} ranks joined rank 0 on port {} within {:.0f} s (start every "
                                "--node-rank with the same --master-addr and --master-port)",
                                joined + 1, size, port, options_.startup_timeout_s);
      break;
    }
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    set_no_delay(fd);
    Hello hello;
    if (!recv_all(fd, &hello, sizeof(hello), after(10)) || hello.magic != kHelloMagic) {
      ::close(fd);  // not a pagellm rank: ignore it
      continue;
    }
    std::string refusal;
    if (hello.version != kProtocolVersion)
      refusal = fmt::format("[tp] rank {} speaks protocol {}, rank 0 {}: run the same pagellm on every node",
                            hello.rank, hello.version, kProtocolVersion);
    else if (hello.size != size)
      refusal = fmt::format("[tp] rank {} was started for a group of {} ranks, rank 0 for {} (--nnodes and "
                            "--tensor-parallel-size must match)", hello.rank, hello.size, size);
    else if (hello.rank < 1 || hello.rank >= size || sockets_[static_cast<size_t>(hello.rank)] >= 0)
      refusal = fmt::format("[tp] a second process claims --node-rank {} (or it is out of [1, {}))", hello.rank, size);
    else if (hello.fingerprint != options_.fingerprint)
      refusal = fmt::format("[tp] rank {} runs a different model or engine config than rank 0 (fingerprint {:016x} "
                            "vs {:016x}): give every rank the same --model, --dtype, --quantization, "
                            "--kv-cache-dtype, --block-size, --tensor-parallel-size and --nnodes",
                            hello.rank, hello.fingerprint, options_.fingerprint);
    Verdict verdict{refusal.empty() ? 1u : 0u, static_cast<uint32_t>(refusal.size())};
    send_all(fd, &verdict, sizeof(verdict), after(10));
    if (!refusal.empty()) {
      send_all(fd, refusal.data(), refusal.size(), after(10));
      ::close(fd);
      status = invalid_argument("{}", refusal);
      break;
    }
    sockets_[static_cast<size_t>(hello.rank)] = fd;
    ++joined;
    LOG_INFO("[tp] rank {} joined", hello.rank);
  }
  ::close(listener);
  return status;
}

Status TcpGroup::connect_to_rank0() {
  PAGELLM_ASSIGN_OR_RETURN(const sockaddr_in address, resolve(options_.master_addr, options_.master_port));
  const Clock::time_point deadline = after(options_.startup_timeout_s);
  int fd = -1;
  while (true) {  // rank 0 may not listen yet
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return internal_error("[tp] socket(): {}", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) break;
    ::close(fd);
    if (Clock::now() >= deadline)
      return invalid_argument("[tp] rank {}: no rank 0 at {}:{} within {:.0f} s (is the --node-rank 0 process "
                              "running?)", options_.rank, options_.master_addr, options_.master_port,
                              options_.startup_timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  set_no_delay(fd);
  sockets_ = {fd};
  Hello hello;
  hello.rank = options_.rank;
  hello.size = options_.size;
  hello.fingerprint = options_.fingerprint;
  Verdict verdict;
  if (!send_all(fd, &hello, sizeof(hello), deadline) || !recv_all(fd, &verdict, sizeof(verdict), deadline))
    return invalid_argument("[tp] rank {}: rank 0 at {}:{} closed the connection before accepting it", options_.rank,
                            options_.master_addr, options_.master_port);
  if (verdict.ok == 1) return Status::ok();
  std::string message(std::min<uint32_t>(verdict.message_bytes, 4096), '\0');
  recv_all(fd, message.data(), message.size(), after(10));
  return invalid_argument("{} (refused by rank 0)", message);
}

Status TcpGroup::wait_until_all_loaded() {
  const uint32_t loaded = kLoadedMagic;
  if (rank() != 0) {
    if (!send_all(sockets_[0], &loaded, sizeof(loaded), after(options_.startup_timeout_s)))
      return invalid_argument("[tp] rank {}: rank 0 closed the connection while the shards loaded", rank());
    return Status::ok();
  }
  const Clock::time_point deadline = after(options_.startup_timeout_s);
  for (int peer = 1; peer < size(); ++peer) {
    uint32_t got = 0;
    if (!recv_all(socket_of(peer), &got, sizeof(got), deadline) || got != kLoadedMagic)
      return invalid_argument("[tp] rank {} did not load its shard within {:.0f} s (its log says why)", peer,
                              options_.startup_timeout_s);
  }
  return Status::ok();
}

int TcpGroup::socket_of(int peer) const {
  CHECK_MSG(rank() == 0 ? (peer >= 1 && peer < size()) : peer == 0, "[tp] rank {} has no connection to rank {}", rank(),
            peer);
  return rank() == 0 ? sockets_[static_cast<size_t>(peer)] : sockets_[0];
}

void TcpGroup::watch_peers() {
  CHECK_MSG(rank() == 0 && !watchdog_.joinable(), "[tp] watch_peers() is rank 0's, once");
  watching_ = true;
  watchdog_ = std::thread([this] {
    std::vector<pollfd> fds;
    for (int peer = 1; peer < size(); ++peer) fds.push_back(pollfd{socket_of(peer), POLLIN | POLLRDHUP, 0});
    std::vector<Clock::time_point> last_heard(fds.size(), Clock::now());
    while (watching_) {
      const int ready = ::poll(fds.data(), fds.size(), 100);
      for (size_t i = 0; i < fds.size() && ready > 0 && watching_; ++i) {
        if (fds[i].revents == 0) continue;
        char bytes[64];  // heartbeats: no rank sends rank 0 anything else while it runs
        const ssize_t n = ::recv(fds[i].fd, bytes, sizeof(bytes), MSG_DONTWAIT);
        if (n > 0) {
          last_heard[i] = Clock::now();
          continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR) || (fds[i].revents & (POLLHUP | POLLRDHUP)))
          if (watching_) fail(static_cast<int>(i) + 1, "the connection closed (the peer's process ended)");
      }
      for (size_t i = 0; i < fds.size() && watching_; ++i)
        if (std::chrono::duration<double>(Clock::now() - last_heard[i]).count() > timeout_s())
          fail(static_cast<int>(i) + 1,
               fmt::format("nothing came for {:.0f} s (the peer's process hangs or is stopped)", timeout_s()));
    }
  });
}

void TcpGroup::stop_watching() {
  watching_ = false;
  if (watchdog_.joinable()) watchdog_.join();
}

void TcpGroup::start_heartbeats() {
  CHECK_MSG(rank() != 0 && !heartbeat_, "[tp] start_heartbeats() is a worker's, once");
  heartbeat_ = std::make_unique<PeriodicThread>(std::chrono::duration<double>(timeout_s() / 4), [this] {
    const char beat = 1;
    // Rank 0 gone: the main thread's next wait for a step ends the process with the error.
    return send_all(sockets_[0], &beat, 1, after(timeout_s()));
  });
}

void TcpGroup::stop_heartbeats() { heartbeat_.reset(); }

void TcpGroup::fail(int peer, const std::string& why) const {
  // A collective cannot return an error through the model's forward: the whole rank ends, as vLLM's
  // workers do when a peer dies.
  LOG_ERROR("[tp] rank {}: {} (rank {}); ending this rank", rank(), why, peer);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "pagellm: error: [tp] rank %d: %s (rank %d)\n", rank(), why.c_str(), peer);
  std::fflush(stderr);
  std::_Exit(1);
}

void TcpGroup::send(int peer, const void* data, size_t bytes, const char* what) {
  const int fd = socket_of(peer);
  const Clock::time_point deadline = after(timeout_s());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLOUT, true, deadline))
      fail(peer, fmt::format("{}: the peer took no data for {:.0f} s (it hangs?)", what, timeout_s()));
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) fail(peer, fmt::format("{}: the connection closed (the peer's process ended)", what));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void TcpGroup::recv(int peer, void* data, size_t bytes, const char* what, double wait_s) {
  const int fd = socket_of(peer);
  const bool bounded = wait_s >= 0;
  const Clock::time_point deadline = after(bounded ? wait_s : 0);
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!wait_ready(fd, POLLIN, bounded, deadline))
      fail(peer, fmt::format("{}: nothing came for {:.0f} s (the peer hangs?)", what, wait_s));
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      fail(peer, fmt::format("{}: the connection closed (the peer's process ended)", what));
    if (n < 0) fail(peer, fmt::format("{}: {}", what, std::strerror(errno)));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace pagellm
