// Small HTTP helpers for the end-to-end tests: JSON requests and SSE streams over loopback.
#pragma once

#include <httplib.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvserve::server::testing {

struct Reply {
  int status = 0;  // 0: no response (connection failed)
  nlohmann::json body;  // discarded when not JSON
  std::string raw;
  httplib::Headers headers;
};

Reply Get(int port, const std::string& path, const httplib::Headers& headers = {});
Reply PostRaw(int port, const std::string& path, const std::string& body,
              const httplib::Headers& headers = {});
inline Reply Post(int port, const std::string& path, const nlohmann::json& body,
                  const httplib::Headers& headers = {}) {
  return PostRaw(port, path, body.dump(), headers);
}

struct StreamReply {
  int status = 0;
  std::vector<nlohmann::json> chunks;  // every `data: {...}` event before [DONE]
  bool done = false;                   // `data: [DONE]` arrived last
  bool cancelled = false;              // the stop callback ended the read
};
// POSTs with "stream": true and parses the SSE events. `stop_after` (optional): return true
// from it to hang up after a chunk.
StreamReply PostStream(int port, const std::string& path, nlohmann::json body,
                       std::function<bool(const nlohmann::json&)> stop_after = nullptr);

// The concatenated text of one choice's stream chunks (completions "text", chat
// "delta.content"), and its finish_reason.
std::string StreamText(const StreamReply& reply, int index = 0);
std::optional<std::string> StreamFinish(const StreamReply& reply, int index = 0);

// A metric's value from /metrics text (the first series of that name); nullopt when absent.
std::optional<double> MetricValue(const std::string& metrics, const std::string& name);

}  // namespace kvserve::server::testing
