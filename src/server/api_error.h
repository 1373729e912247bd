// ApiError: every failure the HTTP layer answers, and the one place a Status becomes an HTTP
// status plus an OpenAI-shaped error object:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": 400}}
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace kvserve::server {

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;                  // "invalid_request_error", "authentication_error", ...
  std::optional<std::string> param;  // the offending field, when one is known
  std::optional<int> retry_after_s;  // sent as Retry-After (503)
};

// InvalidArgument and OutOfRange -> 400 (vLLM answers 400 for a prompt over max-model-len),
// NotFound -> 404, ResourceExhausted / Unavailable -> 503 with Retry-After 1,
// Unimplemented -> 501, anything else -> 500.
ApiError ApiErrorFromStatus(const Status& status);

ApiError BadRequest(std::string message, std::optional<std::string> param = std::nullopt);
ApiError WrongType(std::string message, std::string param);  // 422
ApiError ModelNotFound(const std::string& model);             // 404
ApiError Unauthorized();                                      // 401
ApiError PayloadTooLarge(size_t limit_bytes);                 // 413
ApiError Overloaded(std::string message);                     // 503 + Retry-After

// The JSON body, e.g. {"error": {...}}.
std::string ApiErrorBody(const ApiError& error);

}  // namespace kvserve::server
