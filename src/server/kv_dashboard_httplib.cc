#include "server/kv_dashboard_httplib.h"

#include <httplib.h>

#include "server/kv_dashboard.h"

namespace kvserve::server {
namespace {

DashboardRequest FromHttplib(const httplib::Request& req) {
  DashboardRequest r{req.path, ""};
  const size_t q = req.target.find('?');
  if (q != std::string::npos) r.query = req.target.substr(q + 1);
  return r;
}

void Send(const DashboardResponse& from, httplib::Response& res) {
  res.status = from.status;
  for (const auto& [name, value] : from.headers) res.set_header(name, value);
  res.set_content(from.body, from.content_type);
}

// Streams `stream` until it ends or the client goes away (sink.write fails).
void StartEvents(std::shared_ptr<KvEventStream> stream, httplib::Response& res) {
  const DashboardResponse head = KvDashboard::EventStreamHead();
  for (const auto& [name, value] : head.headers) res.set_header(name, value);
  stream->Start(nullptr);
  res.set_chunked_content_provider(
      head.content_type, [stream](size_t, httplib::DataSink& sink) {
        stream->Wait(std::chrono::milliseconds(1000));
        std::string events;
        const bool over = stream->Pull(&events);
        if (!events.empty() && !sink.write(events.data(), events.size())) return false;
        if (over) sink.done();
        return true;
      });
}

}  // namespace

void AddKvDashboardRoutes(httplib::Server& http, KvDashboard& dashboard) {
  KvDashboard* d = &dashboard;
  http.Get("/v1/kv/state", [d](const httplib::Request& req, httplib::Response& res) {
    Send(d->State(FromHttplib(req)), res);
  });
  http.Get("/v1/kv/block", [d](const httplib::Request& req, httplib::Response& res) {
    Send(d->Block(FromHttplib(req)), res);
  });
  http.Get("/v1/kv/events", [d](const httplib::Request&, httplib::Response& res) {
    auto subscribed = d->Subscribe();
    if (auto* error = std::get_if<DashboardResponse>(&subscribed)) return Send(*error, res);
    StartEvents(std::get<std::shared_ptr<KvEventStream>>(std::move(subscribed)), res);
  });
  auto page = [d](const httplib::Request& req, httplib::Response& res) {
    Send(d->Page(FromHttplib(req)), res);
  };
  http.Get("/dashboard", page);
  http.Get(R"(/dashboard/[A-Za-z0-9_.\-]*)", page);
}

}  // namespace kvserve::server
