// Router: (method, path) -> handler, and where the handler runs.
//
//   router.Add("GET", "/health", Router::kInline, [](const Request&) { return ...; });
//   router.Add("POST", "/v1/completions", Router::kWorker, [this](const Request& r) {...});
//
// kInline handlers run on the I/O thread that read the request, ahead of any queued request
// work, so they must be quick and never block (liveness, metrics, static answers). kWorker
// handlers run on the worker pool (parsing, tokenizing, admitting requests); a slow one
// delays other requests' work but never the I/O threads.
//
// Thread safety: add every route before the server starts; Find is then read-only.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "http/message.h"

namespace kvserve::http {

using Handler = std::function<Response(const Request&)>;

class Router {
 public:
  enum Where { kInline, kWorker };
  struct Route {
    std::string method;
    std::string path;  // exact match; "/prefix/*" matches every path under /prefix/
    Where where = kWorker;
    Handler handler;
  };

  void Add(std::string method, std::string path, Where where, Handler handler);
  // The route for a request, or nullptr (the caller answers 404).
  const Route* Find(std::string_view method, std::string_view path) const;

 private:
  std::vector<Route> routes_;
};

}  // namespace kvserve::http
