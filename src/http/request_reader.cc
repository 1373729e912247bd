#include "http/request_reader.h"

#include <fmt/format.h>
#include <strings.h>

#include <boost/beast/http/error.hpp>

namespace kvserve::http {
namespace {

namespace bhttp = boost::beast::http;

bool IsIdentity(std::string_view coding) {
  while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
    coding.remove_prefix(1);
  }
  while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
    coding.remove_suffix(1);
  }
  return coding.empty() ||
         (coding.size() == 8 && strncasecmp(coding.data(), "identity", 8) == 0);
}

}  // namespace

std::unique_ptr<RequestParser> NewParser(const HttpLimits& limits) {
  auto parser = std::make_unique<RequestParser>();
  parser->header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser->body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
  return parser;
}

std::optional<HttpError> CheckHead(const RequestParser& parser) {
  const auto& head = parser.get();
  for (const auto& field : head) {
    if (field.name() != bhttp::field::content_encoding) continue;
    const std::string_view value(field.value().data(), field.value().size());
    if (!IsIdentity(value)) {
      return HttpError{415, fmt::format("Content-Encoding '{}' is not supported: send the body "
                                        "uncompressed", value.substr(0, 64))};
    }
  }
  if (head.version() != 11 && head.version() != 10) {
    return HttpError{505, "only HTTP/1.0 and HTTP/1.1 are supported"};
  }
  return std::nullopt;
}

std::optional<HttpError> ErrorForParse(const boost::beast::error_code& ec,
                                       const HttpLimits& limits, bool got_bytes) {
  if (ec == bhttp::error::body_limit) {
    return HttpError{413, fmt::format("The request body exceeds the limit of {} bytes.",
                                      limits.max_body_bytes)};
  }
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    return HttpError{431, fmt::format("the request head exceeds the limit of {} bytes",
                                      limits.max_header_bytes)};
  }
  if (ec == bhttp::error::bad_content_length) {
    return HttpError{400, "malformed Content-Length"};
  }
  if (ec == bhttp::error::bad_transfer_encoding) {
    return HttpError{400, "malformed or unsupported Transfer-Encoding"};
  }
  if (ec == bhttp::error::end_of_stream || !got_bytes) return std::nullopt;
  if (ec == bhttp::error::partial_message) return std::nullopt;  // client hung up mid-request
  return HttpError{400, fmt::format("malformed HTTP request ({})", ec.message())};
}

Request TakeRequest(RequestParser& parser) {
  auto& msg = parser.get();
  Request r;
  r.method = std::string(msg.method_string());
  const std::string_view target(msg.target().data(), msg.target().size());
  const size_t q = target.find('?');
  r.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  for (const auto& field : msg) {
    r.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  r.body = std::move(msg.body());
  return r;
}

bool ExpectsContinue(const RequestParser& parser) {
  const auto& head = parser.get();
  auto it = head.find(bhttp::field::expect);
  return it != head.end() && strncasecmp(it->value().data(), "100-continue", 12) == 0 &&
         it->value().size() == 12;
}

std::variant<std::monostate, Request, HttpError> ParseRequestBytes(std::string_view bytes,
                                                                   const HttpLimits& limits) {
  std::unique_ptr<RequestParser> parser = NewParser(limits);
  parser->eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  bool head_checked = false;
  while (used < bytes.size() && !parser->is_done()) {
    const size_t n = parser->put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == bhttp::error::need_more) break;
    if (ec) {
      if (std::optional<HttpError> e = ErrorForParse(ec, limits, true)) return *e;
      return std::monostate{};
    }
    used += n;
    if (parser->is_header_done() && !head_checked) {
      head_checked = true;
      if (std::optional<HttpError> e = CheckHead(*parser)) return *e;
    }
    if (n == 0) break;
  }
  if (!parser->is_done()) return std::monostate{};
  return TakeRequest(*parser);
}

}  // namespace kvserve::http
