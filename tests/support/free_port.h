// A TCP port of 127.0.0.1 that was free a moment ago, for tests that must name a port before a server
// binds it (tensor-parallel ranks meet on --master-port). It is drawn below the kernel's ephemeral
// range (ip_local_port_range starts at 32768 by default): servers of other tests started with
// --port 0 take their ports from that range, so they cannot take this one between the check here
// and the bind of the rank that listens (a port-0 pick could, and a rank then talked to an HTTP server).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace pagellm::test {

inline bool local_port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);  // as rank 0 binds it
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return free;
}

inline int free_local_port() {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> draw(20000, 32000);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = draw(rng);
    if (local_port_is_free(port)) return port;
  }
  return draw(rng);  // every try was taken: let the test report the bind error
}

}  // namespace pagellm::test
