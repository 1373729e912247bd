// How the HTTP front reads one request: the parser's limits, the checks made once the head is
// in, the error each parse failure answers, and the conversion to http::Request. The
// connection (http_server.cc) and the fuzz target (fuzz/http_request_fuzz.cc) share these, so
// what is fuzzed is what serves.
//
// Limits, applied before the body is stored:
//   - the head (request line + fields) at most `max_header_bytes` (431 above it);
//   - the body at most `max_body_bytes` after transfer decoding: a Content-Length above it is
//     refused as soon as the head is in, a chunked body as soon as its chunks pass it (413);
//   - Content-Encoding other than identity is refused (415): bodies are never inflated, so a
//     small compressed request cannot become a large one;
//   - a malformed Content-Length (negative, not a number, over 2^64, repeated with different
//     values) is a 400 right after the head, without waiting for a body.
// Not thread-safe per parser; the functions are pure.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "http/message.h"

namespace kvserve::http {

struct HttpLimits {
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 64u << 10;
};

// A failure answered before any handler runs; the connection closes after it.
struct HttpError {
  int status = 400;
  std::string message;
};

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// A parser for one request with the limits set.
std::unique_ptr<RequestParser> NewParser(const HttpLimits& limits);
// Checks made when the head is complete (before the body is read): the error to answer, or
// nullopt to go on.
std::optional<HttpError> CheckHead(const RequestParser& parser);
// The error to answer for a parse failure; nullopt when nothing should be answered (the
// client closed the connection before sending a whole head).
std::optional<HttpError> ErrorForParse(const boost::beast::error_code& ec,
                                       const HttpLimits& limits, bool got_bytes);
// The finished request (moves the body out of the parser).
Request TakeRequest(RequestParser& parser);
// Whether the client asked for "Expect: 100-continue".
bool ExpectsContinue(const RequestParser& parser);

// Parses one whole request from `bytes` (tests and fuzzing): the request, the error the
// server would answer, or nullopt when `bytes` end before the request does.
std::variant<std::monostate, Request, HttpError> ParseRequestBytes(std::string_view bytes,
                                                                   const HttpLimits& limits);

}  // namespace kvserve::http
