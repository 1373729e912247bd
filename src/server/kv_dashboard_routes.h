// The dashboard's routes (server/kv_dashboard.h) on the HTTP front's router (http/router.h): a
// thin adapter, the only file that knows both. An event stream is a streamed response whose
// producer is the stream's subscription, so an open dashboard holds no thread.
#pragma once

#include <functional>

#include "http/router.h"

namespace kvserve::server {

class KvDashboard;

// GET /v1/kv/state, /v1/kv/block, /v1/kv/events (each wrapped by `protect`: the API key), and
// GET /dashboard, /dashboard/, /dashboard/<file> (the page asks for the key itself).
// `dashboard` must outlive the router's use.
void AddKvDashboardRoutes(http::Router& router, KvDashboard& dashboard,
                          const std::function<http::Handler(http::Handler)>& protect);

}  // namespace kvserve::server
