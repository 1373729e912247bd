#include "server/kv_dashboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "server/api_error.h"
#include "server/dashboard_assets.h"
#include "server/responses.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

constexpr size_t kRecent = 8;  // published states kept for ?sequence=N and block lookups

// The page may load only its own files and talk only to this server.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

DashboardResponse Error(const ApiError& error) {
  DashboardResponse r;
  r.status = error.http_status;
  if (error.retry_after_s) r.headers.emplace_back("Retry-After", std::to_string(*error.retry_after_s));
  r.body = ApiErrorBody(error);
  return r;
}

DashboardResponse JsonResponse(std::string body) {
  DashboardResponse r;
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

// The integer value of `key` in a query string "a=1&b=2"; nullopt when absent or not one.
std::optional<int64_t> QueryInt(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || pair.substr(0, eq) != key) continue;
    const std::string_view value = pair.substr(eq + 1);
    int64_t out = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
    if (ec != std::errc() || end != value.data() + value.size()) return std::nullopt;
    return out;
  }
  return std::nullopt;
}

bool HasQueryKey(std::string_view query, std::string_view key) {
  const std::string k = std::string(key) + "=";
  return query.starts_with(k) || query.find("&" + k) != std::string_view::npos;
}

ApiError NotFoundError(std::string message) {
  return {404, std::move(message), "NotFoundError", std::nullopt, std::nullopt};
}

}  // namespace

void KvEventStream::Start(std::function<void()> wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = std::move(wake);
  }
  Wake();
}

bool KvEventStream::Pull(std::string* out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::shared_ptr<const std::string>& event : queue_) out->append(*event);
  queue_.clear();
  return ended_;
}

void KvEventStream::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return ended_ || !queue_.empty(); });
}

bool KvEventStream::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void KvEventStream::Push(std::shared_ptr<const std::string> event, size_t max_queued) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    if (queue_.size() >= max_queued) {
      queue_.clear();
      dropped_ = true;
      ended_ = true;
    } else {
      queue_.push_back(std::move(event));
    }
  }
  Wake();
}

void KvEventStream::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
  }
  Wake();
}

void KvEventStream::Wake() {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = wake_;
  }
  cv_.notify_all();
  if (wake) wake();
}

KvDashboard::KvDashboard(engine::AsyncEngine& engine, KvDashboardOptions options)
    : engine_(engine), options_(std::move(options)), publisher_([this] { Run(); }) {}

KvDashboard::~KvDashboard() { Stop(); }

void KvDashboard::Stop() {
  std::vector<std::shared_ptr<KvEventStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (const std::weak_ptr<KvEventStream>& w : subscribers_) {
      if (std::shared_ptr<KvEventStream> s = w.lock()) streams.push_back(std::move(s));
    }
    subscribers_.clear();
  }
  cv_.notify_all();
  for (const std::shared_ptr<KvEventStream>& s : streams) s->End();
  publisher_.join();
}

std::optional<KvDashboard::Published> KvDashboard::Take() {
  std::shared_ptr<const engine::KvSnapshot> snapshot = engine_.KvState(options_.state_timeout);
  if (!snapshot) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Published& p : recent_) {
      if (p.snapshot->sequence == snapshot->sequence) return p;  // another caller encoded it
    }
  }
  RateMeter::Rates rates;
  size_t streams = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rates = rates_.Add(*snapshot);
    HasSubscribersLocked();
    streams = subscribers_.size();
  }
  json state = KvStateJson(*snapshot, rates, options_.model_name);
  state["events"] = {{"streams", streams}, {"interval_ms", EventInterval(streams).count()}};
  Published p{snapshot, std::make_shared<const std::string>(Dump(state))};
  std::lock_guard<std::mutex> lock(mu_);
  if (recent_.empty() || recent_.back().snapshot->sequence < snapshot->sequence) {
    recent_.push_back(p);
    if (recent_.size() > kRecent) recent_.pop_front();
  }
  return p;
}

bool KvDashboard::HasSubscribersLocked() {
  std::erase_if(subscribers_, [](const std::weak_ptr<KvEventStream>& w) { return w.expired(); });
  return !subscribers_.empty();
}

std::chrono::milliseconds KvDashboard::EventInterval(size_t streams) const {
  if (options_.max_events_per_s == 0) return options_.interval;
  const auto spread = std::chrono::milliseconds(streams * 1000 / options_.max_events_per_s);
  return std::max(options_.interval, spread);
}

void KvDashboard::Run() {
  auto next = std::chrono::steady_clock::now();
  while (true) {
    size_t num_streams = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_until(lock, next, [&] { return stopped_; });
      cv_.wait(lock, [&] { return stopped_ || HasSubscribersLocked(); });
      if (stopped_) return;
      num_streams = subscribers_.size();
    }
    next = std::chrono::steady_clock::now() + EventInterval(num_streams);
    std::optional<Published> p = Take();
    if (!p) continue;
    auto event = std::make_shared<const std::string>(
        fmt::format("id: {}\ndata: {}\n\n", p->snapshot->sequence, *p->json));
    std::vector<std::shared_ptr<KvEventStream>> streams;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::weak_ptr<KvEventStream>& w : subscribers_) {
        if (std::shared_ptr<KvEventStream> s = w.lock()) streams.push_back(std::move(s));
      }
    }
    int64_t dropped = 0;
    for (const std::shared_ptr<KvEventStream>& s : streams) {
      const bool was_dropped = s->dropped();
      s->Push(event, options_.max_queued_events);
      if (!was_dropped && s->dropped()) ++dropped;
    }
    if (dropped > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      num_dropped_ += dropped;
    }
  }
}

DashboardResponse KvDashboard::State(const DashboardRequest& request) {
  if (HasQueryKey(request.query, "sequence")) {
    const std::optional<int64_t> sequence = QueryInt(request.query, "sequence");
    if (!sequence) return Error(BadRequest("'sequence' must be an integer", "sequence"));
    std::lock_guard<std::mutex> lock(mu_);
    for (const Published& p : recent_) {
      if (static_cast<int64_t>(p.snapshot->sequence) == *sequence) return JsonResponse(*p.json);
    }
    return Error(NotFoundError(fmt::format("state {} is no longer kept", *sequence)));
  }
  std::optional<Published> p = Take();
  if (!p) {
    return Error(Overloaded("the engine did not answer in time"));
  }
  return JsonResponse(*p->json);
}

DashboardResponse KvDashboard::Block(const DashboardRequest& request) {
  const std::optional<int64_t> group = QueryInt(request.query, "group");
  const std::optional<int64_t> id = QueryInt(request.query, "id");
  if (!group || !id) {
    return Error(BadRequest("'group' and 'id' must be integers", group ? "id" : "group"));
  }
  auto info = std::make_shared<std::optional<engine::KvBlockInfo>>();
  const int g = static_cast<int>(std::clamp<int64_t>(*group, -1, 1 << 20));
  const kv::BlockId b = static_cast<kv::BlockId>(std::clamp<int64_t>(*id, -1, 1 << 30));
  if (!engine_.RunAtStepBoundary(
          [info, g, b](const engine::Engine& e) { *info = engine::TakeKvBlockInfo(e, g, b); },
          options_.state_timeout)) {
    return Error(Overloaded("the engine did not answer in time"));
  }
  if (!*info) return Error(NotFoundError(fmt::format("no block {} in group {}", *id, *group)));
  return JsonResponse(Dump(KvBlockJson(**info, g, b)));
}

DashboardResponse KvDashboard::Page(const DashboardRequest& request) const {
  std::string_view name = request.path;
  name.remove_prefix(std::min(name.size(), std::string_view("/dashboard").size()));
  if (name.empty() || name == "/") name = "/index.html";
  name.remove_prefix(1);
  const std::optional<EmbeddedAsset> asset = FindDashboardAsset(name);
  if (!asset) return Error(NotFoundError(fmt::format("no dashboard file '{}'", name)));
  DashboardResponse r;
  r.content_type = std::string(asset->content_type);
  r.body = std::string(asset->data);
  r.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
               {"X-Content-Type-Options", "nosniff"},
               {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"}};
  return r;
}

std::variant<std::shared_ptr<KvEventStream>, DashboardResponse> KvDashboard::Subscribe() {
  auto stream = std::make_shared<KvEventStream>();
  std::shared_ptr<const std::string> first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Error(Overloaded("shutting down"));
    HasSubscribersLocked();
    if (subscribers_.size() >= options_.max_subscribers) {
      return Error(Overloaded(
          fmt::format("too many event streams (at most {})", options_.max_subscribers)));
    }
    subscribers_.push_back(stream);
    if (!recent_.empty()) {
      const Published& p = recent_.back();
      first = std::make_shared<const std::string>(
          fmt::format("id: {}\ndata: {}\n\n", p.snapshot->sequence, *p.json));
    }
  }
  cv_.notify_all();
  if (first) stream->Push(std::move(first), options_.max_queued_events);
  return stream;
}

DashboardResponse KvDashboard::EventStreamHead() {
  DashboardResponse r;
  r.content_type = "text/event-stream";
  r.headers = {{"Cache-Control", "no-store"}, {"X-Accel-Buffering", "no"}};
  return r;
}

int64_t KvDashboard::num_dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_dropped_;
}

size_t KvDashboard::num_subscribers() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const std::weak_ptr<KvEventStream>& w : subscribers_) n += w.expired() ? 0 : 1;
  return n;
}

}  // namespace kvserve::server
