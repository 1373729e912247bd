// libFuzzer target: HTTP request parsing exactly as the server does it (http/request_reader.h:
// the Beast parser with the server's limits, the head checks, the error mapping). Every input
// gives a request, an error status in 4xx/5xx, or "needs more bytes"; an accepted request's
// body never exceeds the body limit.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "http/request_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::http;
  HttpLimits limits;
  limits.max_body_bytes = 4096;  // small, so the limit is reachable
  limits.max_header_bytes = 8192;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto result = ParseRequestBytes(bytes, limits);
  if (auto* r = std::get_if<Request>(&result)) {
    if (r->body.size() > limits.max_body_bytes) __builtin_trap();
    (void)r->Header("content-type");
  } else if (auto* e = std::get_if<HttpError>(&result)) {
    if (e->status < 400 || e->status > 599 || e->message.empty()) __builtin_trap();
  }
  return 0;
}
