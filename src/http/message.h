// The HTTP request and response types route handlers see: plain structs that know nothing of
// the library underneath (src/http/http_server.cc uses Boost.Beast), so a route is a function
// from Request to Response and adding one is a few lines (src/http/router.h).
//
// A response is either whole (status, headers, body) or produced over time by a Producer:
// streamed (the head goes out at once, the body as HTTP/1.1 chunks as it is produced: SSE) or
// deferred (the server waits for the producer to finish, then sends the whole response it
// built; a non-streaming completion).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::http {

// Header fields in arrival order; names compare case-insensitively.
using Headers = std::vector<std::pair<std::string, std::string>>;

// The value of the first field named `name` (any case), or nullopt.
std::optional<std::string_view> FindHeader(const Headers& headers, std::string_view name);

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target before '?', e.g. "/v1/completions"
  std::string query;   // after '?', undecoded; empty when none
  Headers headers;
  std::string body;    // decoded (chunked transfer coding removed); at most the body limit

  std::optional<std::string_view> Header(std::string_view name) const {
    return FindHeader(headers, name);
  }
};

struct Response;

// A response body produced over time, e.g. from engine outputs. The server calls Start once,
// then Pull on one of its I/O threads whenever the producer has woken it, never two calls at
// once for one producer. Destroying the producer (client gone, stream finished, server
// stopping) must release what it holds, e.g. abort its engine requests.
class Producer {
 public:
  virtual ~Producer() = default;
  // `wake` is thread-safe and cheap: call it (from any thread) whenever Pull has something
  // new. The server calls Pull once right after Start.
  virtual void Start(std::function<void()> wake) = 0;
  // Appends what is ready to `response->body` (streamed: sent as one chunk per Pull); a
  // deferred producer may also set status and headers. Returns true when the body is complete.
  virtual bool Pull(Response* response) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;   // besides Content-Type, Content-Length / Transfer-Encoding, Connection
  std::string body;
  std::shared_ptr<Producer> producer;  // null: the body above is the whole response
  bool streamed = false;               // with a producer: chunked now, else whole at the end

  static Response Text(int status, std::string body, std::string content_type) {
    Response r;
    r.status = status;
    r.body = std::move(body);
    r.content_type = std::move(content_type);
    return r;
  }
};

}  // namespace kvserve::http
