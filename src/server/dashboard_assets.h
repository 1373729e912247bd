// The dashboard's files (web/dashboard/), compiled into the binary by CMake
// (cmake/embed_files.cmake writes dashboard_assets.cc at build time): nothing is read from
// disk or fetched at run time.
#pragma once

#include <optional>
#include <string_view>

namespace kvserve::server {

struct EmbeddedAsset {
  std::string_view name;          // "index.html", "dashboard.js", ...
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view data;
};

// The file called `name`, or nullopt.
std::optional<EmbeddedAsset> FindDashboardAsset(std::string_view name);

}  // namespace kvserve::server
