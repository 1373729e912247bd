// Raw loopback HTTP clients for the hostile-load tests: bytes exactly as written (malformed
// heads, half-sent requests, clients that never read) and an epoll driver for thousands of
// concurrent requests from one thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kvserve::server::testing {

// A blocking loopback TCP connection. Closes on destruction.
class RawConnection {
 public:
  explicit RawConnection(int port, int receive_buffer_bytes = 0);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // False when the peer closed or reset.
  bool Send(const std::string& bytes);
  // Reads until the peer closes, `timeout` passes or `max_bytes` arrived.
  std::string ReadAll(std::chrono::milliseconds timeout, size_t max_bytes = 64u << 20);
  // Reads one response: head, then Content-Length bytes, or up to close. "" on timeout.
  std::string ReadResponse(std::chrono::milliseconds timeout);
  // Whether bytes (or a close) are waiting to be read within `timeout`.
  bool Readable(std::chrono::milliseconds timeout);
  // Whether the peer has closed (a read returns 0 or an error within `timeout`).
  bool PeerClosed(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
};

// The status code of a raw response ("HTTP/1.1 413 ..." -> 413); 0 when none.
int StatusOf(const std::string& response);
// The response body (after the blank line), chunked coding not removed.
std::string BodyOf(const std::string& response);

// One request per connection (each with "Connection: close"), all opened at once and driven
// by epoll until every one has an answer or `timeout` passes.
struct LoadOutcome {
  std::vector<int> statuses;  // per client; 0 = no response
  int num_connect_failures = 0;
  int num_resets = 0;          // ECONNRESET / EPIPE / refused
  int num_silent = 0;          // closed or timed out without a status line
  int num_incomplete_streams = 0;  // 200 SSE without data: [DONE]
};
LoadOutcome RunClients(int port, const std::vector<std::string>& requests,
                       std::chrono::milliseconds timeout);

// "POST path HTTP/1.1" with a JSON body and Connection: close.
std::string PostRequest(const std::string& path, const std::string& body,
                        const std::string& extra_headers = "");

// Resident set size of a process in bytes (from /proc); 0 when unknown.
size_t ResidentBytes(int pid);

}  // namespace kvserve::server::testing
