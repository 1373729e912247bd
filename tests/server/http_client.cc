#include "http_client.h"

#include <chrono>
#include <sstream>
#include <thread>

namespace kvserve::server::testing {

using json = nlohmann::json;

namespace {
Reply ToReply(const httplib::Result& res) {
  Reply reply;
  if (!res) return reply;
  reply.status = res->status;
  reply.raw = res->body;
  reply.headers = res->headers;
  reply.body = json::parse(res->body, nullptr, false);
  return reply;
}
}  // namespace

Reply Get(int port, const std::string& path, const httplib::Headers& headers) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  return ToReply(client.Get(path.c_str(), headers));
}

Reply PostRaw(int port, const std::string& path, const std::string& body,
              const httplib::Headers& headers) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  return ToReply(client.Post(path.c_str(), headers, body, "application/json"));
}

StreamReply PostStream(int port, const std::string& path, json body,
                       std::function<bool(const json&)> stop_after) {
  body["stream"] = true;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  StreamReply reply;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& r) {
    reply.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        reply.done = true;
        continue;
      }
      reply.chunks.push_back(json::parse(payload, nullptr, false));
      if (stop_after && stop_after(reply.chunks.back())) {
        reply.cancelled = true;
        return false;
      }
    }
    return true;
  };
  // Like the openai clients, retry a request that got no response at all (refused or reset
  // before any byte came back): httplib 0.11's listen backlog is 5, so a burst of 50 connects
  // can see some connections dropped at first.
  for (int attempt = 0;; ++attempt) {
    httplib::Result res = client.send(req);
    if (res && reply.status == 0) reply.status = res->status;
    const bool never_connected = !res && reply.status == 0 && reply.chunks.empty();
    if (!never_connected || attempt == 4) return reply;
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * (attempt + 1)));
  }
}

std::string StreamText(const StreamReply& reply, int index) {
  std::string text;
  for (const json& chunk : reply.chunks) {
    for (const json& c : chunk.value("choices", json::array())) {
      if (c.value("index", -1) != index) continue;
      if (c.contains("text")) text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) {
        text += c["delta"]["content"].get<std::string>();
      }
    }
  }
  return text;
}

std::optional<std::string> StreamFinish(const StreamReply& reply, int index) {
  for (const json& chunk : reply.chunks) {
    for (const json& c : chunk.value("choices", json::array())) {
      if (c.value("index", -1) == index && c["finish_reason"].is_string()) {
        return c["finish_reason"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

std::optional<double> MetricValue(const std::string& metrics, const std::string& name) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return std::nullopt;
}

}  // namespace kvserve::server::testing
