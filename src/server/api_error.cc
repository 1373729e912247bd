#include "server/api_error.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kvserve::server {

ApiError ApiErrorFromStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return BadRequest(status.message());
    case StatusCode::kNotFound:
      return {404, status.message(), "NotFoundError", std::nullopt, std::nullopt};
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      return Overloaded(status.message());
    case StatusCode::kUnimplemented:
      return {501, status.message(), "NotImplementedError", std::nullopt, std::nullopt};
    default:
      return {500, status.ToString(), "InternalServerError", std::nullopt, std::nullopt};
  }
}

ApiError BadRequest(std::string message, std::optional<std::string> param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::nullopt};
}

ApiError WrongType(std::string message, std::string param) {
  return {422, std::move(message), "invalid_request_error", std::move(param), std::nullopt};
}

ApiError ModelNotFound(const std::string& model) {
  return {404, fmt::format("The model `{}` does not exist.", model), "NotFoundError",
          "model", std::nullopt};
}

ApiError Unauthorized() {
  return {401, "Incorrect API key provided.", "authentication_error", std::nullopt,
          std::nullopt};
}

ApiError PayloadTooLarge(size_t limit_bytes) {
  return {413, fmt::format("The request body exceeds the limit of {} bytes.", limit_bytes),
          "invalid_request_error", std::nullopt, std::nullopt};
}

ApiError Overloaded(std::string message) {
  return {503, std::move(message), "ServiceUnavailableError", std::nullopt, 1};
}

std::string ApiErrorBody(const ApiError& error) {
  nlohmann::json body = {{"message", error.message},
                         {"type", error.type},
                         {"param", nullptr},
                         {"code", error.http_status}};
  if (error.param) body["param"] = *error.param;
  return nlohmann::json{{"error", body}}.dump(-1, ' ', false,
                                              nlohmann::json::error_handler_t::replace);
}

}  // namespace kvserve::server
