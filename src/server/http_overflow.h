// HttpOverflow: where the server puts connections that get no slot (every slot taken, or their
// address at its cap) instead of refusing them blind. One thread watches them without blocking:
//
//   accepted, no slot ──▶ admit(fd) ──▶ complete head within kHeadDeadlineMs?
//        ├─ "GET|HEAD <quick path>" without a body ──▶ serve_quick(fd, request)   (/health under a flood)
//        └─ anything else, no head in time, or pushed out by newer ones ──▶ 503 + close
//
// At most kMaxPending sockets wait here; a newer one pushes the oldest out, so a flood cannot hold
// the door shut for a quick probe that arrives after it.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_message.h"

namespace pagellm::server {

class HttpOverflow {
 public:
  // Answers one quick request on fd (blocking is fine: quick routes answer at once) and closes it.
  using QuickFn = std::function<void(int fd, const HttpRequest& request)>;

  HttpOverflow(std::vector<std::string> quick_paths, QuickFn serve_quick);
  ~HttpOverflow();  // stops the thread; closes the sockets still waiting

  void start();
  // Takes ownership of fd; `busy` is the complete 503 response it gets unless it is a quick request.
  void admit(int fd, std::string busy);

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    int fd = -1;
    Clock::time_point deadline;
    std::string head;  // bytes read so far
    std::string busy;
  };
  void loop();
  void refuse(Waiting& waiting);
  // True when `waiting` is done (answered or refused): read what arrived, look for a quick head.
  bool advance(Waiting& waiting);

  std::vector<std::string> quick_paths_;
  QuickFn serve_quick_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  bool stopping_ = false;  // under mutex_

  std::mutex mutex_;
  std::vector<Waiting> incoming_;  // admitted, not yet picked up by the thread
};

}  // namespace pagellm::server
