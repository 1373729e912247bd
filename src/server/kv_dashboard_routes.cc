#include "server/kv_dashboard_routes.h"

#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "server/kv_dashboard.h"

namespace kvserve::server {
namespace {

DashboardRequest FromHttp(const http::Request& req) { return {req.path, req.query}; }

http::Response ToHttp(DashboardResponse from) {
  http::Response r = http::Response::Text(from.status, std::move(from.body),
                                          std::move(from.content_type));
  r.headers = std::move(from.headers);
  return r;
}

// One client's /v1/kv/events: the subscription's events as the chunks of a streamed body.
class EventProducer : public http::Producer {
 public:
  explicit EventProducer(std::shared_ptr<KvEventStream> stream) : stream_(std::move(stream)) {}
  void Start(std::function<void()> wake) override { stream_->Start(std::move(wake)); }
  bool Pull(http::Response* response) override { return stream_->Pull(&response->body); }

 private:
  std::shared_ptr<KvEventStream> stream_;  // unsubscribes when the producer goes
};

}  // namespace

void AddKvDashboardRoutes(http::Router& router, KvDashboard& dashboard,
                          const std::function<http::Handler(http::Handler)>& protect) {
  using http::Request;
  using http::Router;
  KvDashboard* d = &dashboard;
  // State and Block wait for the engine's next step boundary: off the I/O threads.
  router.Add("GET", "/v1/kv/state", Router::kWorker,
             protect([d](const Request& req) { return ToHttp(d->State(FromHttp(req))); }));
  router.Add("GET", "/v1/kv/block", Router::kWorker,
             protect([d](const Request& req) { return ToHttp(d->Block(FromHttp(req))); }));
  router.Add("GET", "/v1/kv/events", Router::kInline, protect([d](const Request&) {
               auto subscribed = d->Subscribe();
               if (auto* error = std::get_if<DashboardResponse>(&subscribed)) {
                 return ToHttp(std::move(*error));
               }
               http::Response r = ToHttp(KvDashboard::EventStreamHead());
               r.producer = std::make_shared<EventProducer>(
                   std::get<std::shared_ptr<KvEventStream>>(std::move(subscribed)));
               r.streamed = true;
               return r;
             }));
  auto page = [d](const Request& req) { return ToHttp(d->Page(FromHttp(req))); };
  router.Add("GET", "/dashboard", Router::kInline, page);
  router.Add("GET", "/dashboard/", Router::kInline, page);
  router.Add("GET", "/dashboard/*", Router::kInline, page);
}

}  // namespace kvserve::server
