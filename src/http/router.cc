#include "http/router.h"

#include <strings.h>

namespace kvserve::http {

std::optional<std::string_view> FindHeader(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  }
  return std::nullopt;
}

void Router::Add(std::string method, std::string path, Where where, Handler handler) {
  routes_.push_back({std::move(method), std::move(path), where, std::move(handler)});
}

const Router::Route* Router::Find(std::string_view method, std::string_view path) const {
  for (const Route& r : routes_) {
    if (r.method != method) continue;
    if (r.path == path) return &r;
    if (r.path.ends_with("/*") && path.size() >= r.path.size() &&
        path.starts_with(std::string_view(r.path).substr(0, r.path.size() - 1))) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace kvserve::http
