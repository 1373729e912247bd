// The dashboard's routes (server/kv_dashboard.h) on the cpp-httplib front: a thin adapter,
// the only file that knows both. Event streams hold one HTTP thread each while open.
#pragma once

namespace httplib {
class Server;
}  // namespace httplib

namespace kvserve::server {

class KvDashboard;

// GET /v1/kv/state, /v1/kv/block, /v1/kv/events, /dashboard and /dashboard/*. note: the API
// key is checked before routing (Server's pre-routing handler covers /v1/).
void AddKvDashboardRoutes(httplib::Server& http, KvDashboard& dashboard);

}  // namespace kvserve::server
