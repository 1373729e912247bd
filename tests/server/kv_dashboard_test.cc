// KvDashboard's routes over a real AsyncEngine (the fake model): the state JSON adds up and
// names what /metrics names, recent states stay reachable by sequence, block lookups name
// their holders, the page is embedded under a strict CSP, and the event streams: every
// reader gets the same events, a reader that stops reading is dropped while the others and
// the engine carry on, many streams share the event budget, and Stop ends every stream.
#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine_test_util.h"
#include "server/kv_dashboard.h"
#include "server/kv_state_json.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::unique_ptr<engine::AsyncEngine> MakeEngine(int sleep_us) {
  engine::testing::FakeEngineOptions o;
  o.sleep_us = sleep_us;
  o.num_blocks = 64;
  return std::make_unique<engine::AsyncEngine>(engine::testing::MakeFakeEngine(o));
}

engine::RequestHandle Add(engine::AsyncEngine& e, std::vector<int32_t> prompt, int max_tokens) {
  engine::EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  Result<engine::RequestHandle> h = e.AddRequest(std::move(r));
  CHECK(h.ok());
  return *h;
}

void Drain(engine::RequestHandle& h) {
  while (h.stream->Next()) {
  }
}

TEST(KvStateJsonTest, BlockMapIsRunLengthEncoded) {
  engine::KvGroupSnapshot g;
  using S = kv::BlockState;
  g.states = {S::kNull, S::kUsed, S::kShared, S::kShared, S::kCached, S::kFree, S::kFree};
  EXPECT_EQ(EncodeBlockMap(g), "n1u1s2c1f2");
}

// Rates over the last second or so; with states seconds apart (many dashboards open: the
// interval grows), over the time since the previous one.
TEST(RateMeterTest, RatesOverTheLastSecondOrTheLastInterval) {
  RateMeter meter;
  auto at = [](double uptime_s, int64_t tokens) {
    engine::KvSnapshot s;
    s.uptime_s = uptime_s;
    s.metrics.num_generation_tokens = tokens;
    return s;
  };
  EXPECT_EQ(meter.Add(at(0.0, 0)).window_s, 0);
  for (int i = 1; i <= 8; ++i) meter.Add(at(0.25 * i, 100 * i));  // 400 tokens/s
  RateMeter::Rates r = meter.Add(at(2.25, 900));
  EXPECT_DOUBLE_EQ(r.window_s, 1.0);
  EXPECT_DOUBLE_EQ(r.generation_tokens_per_s, 400);
  r = meter.Add(at(8.25, 3300));  // 6 s later
  EXPECT_DOUBLE_EQ(r.window_s, 6.0);
  EXPECT_DOUBLE_EQ(r.generation_tokens_per_s, 400);
}

TEST(KvDashboardTest, StateAddsUpAndNamesTheMetrics) {
  auto eng = MakeEngine(5000);
  KvDashboard dash(*eng, {.model_name = "fake"});
  engine::RequestHandle a = Add(*eng, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 40);
  ASSERT_TRUE(a.stream->Next());  // a's first token: its first blocks are computed and cached
  engine::RequestHandle b = Add(*eng, {1, 2, 3, 4, 5, 6, 7, 8, 11, 12}, 40);
  ASSERT_TRUE(b.stream->Next());  // b runs, sharing them
  DashboardResponse r = dash.State({"/v1/kv/state", ""});
  ASSERT_EQ(r.status, 200) << r.body;
  const json s = json::parse(r.body);
  EXPECT_EQ(s["model"], "fake");
  const json& blocks = s["groups"][0]["blocks"];
  EXPECT_EQ(blocks["used"].get<int>() + blocks["cached"].get<int>() + blocks["free"].get<int>(),
            blocks["total"].get<int>());
  EXPECT_EQ(blocks["total"], 64);
  ASSERT_EQ(s["requests"].size(), 2u);
  int held = 0;  // blocks in the request tables; the shared first 2 blocks count twice
  for (const json& req : s["requests"]) held += req["blocks"][0].get<int>();
  EXPECT_GE(held, blocks["used"].get<int>());
  EXPECT_NE(s["groups"][0]["map"].get<std::string>().find('s'), std::string::npos)
      << "the two prompts share their first two blocks";
  for (const char* key : {"steps", "preemptions", "prompt_tokens", "generation_tokens",
                          "prefix_cache_hits", "prefix_cache_queries", "running", "waiting"}) {
    EXPECT_TRUE(s["engine"].contains(key)) << key;
  }
  const int64_t seq = s["sequence"];
  // The same frame again by its sequence; an unknown one is 404.
  EXPECT_EQ(dash.State({"/v1/kv/state", "sequence=" + std::to_string(seq)}).body, r.body);
  EXPECT_EQ(dash.State({"/v1/kv/state", "sequence=999999"}).status, 404);
  EXPECT_EQ(dash.State({"/v1/kv/state", "sequence=x"}).status, 400);
  // A block of the first request: held by it (and by the second: the shared prefix).
  const int first = s["requests"][0]["block_runs"][0][0][0];
  DashboardResponse br = dash.Block({"/v1/kv/block", "group=0&id=" + std::to_string(first)});
  ASSERT_EQ(br.status, 200) << br.body;
  const json block = json::parse(br.body);
  EXPECT_EQ(block["state"], "shared");
  EXPECT_EQ(block["owners"].size(), 2u);
  EXPECT_EQ(block["ref_count"], 2);
  EXPECT_EQ(block["hash"].get<std::string>().size(), 32u);
  EXPECT_EQ(dash.Block({"/v1/kv/block", "group=0&id=100000"}).status, 404);
  EXPECT_EQ(dash.Block({"/v1/kv/block", "group=0"}).status, 400);
  Drain(a);
  Drain(b);
  const json end = json::parse(dash.State({"/v1/kv/state", ""}).body);
  EXPECT_EQ(end["groups"][0]["blocks"]["used"], 0);
  EXPECT_EQ(end["engine"]["finished"], 2);
  EXPECT_EQ(end["engine"]["generation_tokens"], 80);
  EXPECT_GT(end["sequence"].get<int64_t>(), seq);
}

TEST(KvDashboardTest, PageIsEmbeddedUnderAStrictPolicy) {
  auto eng = MakeEngine(0);
  KvDashboard dash(*eng, {});
  for (const char* path : {"/dashboard", "/dashboard/", "/dashboard/index.html"}) {
    DashboardResponse r = dash.Page({path, ""});
    ASSERT_EQ(r.status, 200) << path;
    EXPECT_NE(r.content_type.find("text/html"), std::string::npos);
    EXPECT_NE(r.body.find("dashboard.js"), std::string::npos);
    bool csp = false;
    for (const auto& [name, value] : r.headers) {
      if (name != "Content-Security-Policy") continue;
      csp = true;
      EXPECT_NE(value.find("default-src 'none'"), std::string::npos);
      EXPECT_NE(value.find("script-src 'self'"), std::string::npos);
      EXPECT_EQ(value.find("unsafe"), std::string::npos);
    }
    EXPECT_TRUE(csp) << path;
  }
  DashboardResponse js = dash.Page({"/dashboard/dashboard.js", ""});
  EXPECT_EQ(js.status, 200);
  EXPECT_NE(js.content_type.find("javascript"), std::string::npos);
  EXPECT_EQ(dash.Page({"/dashboard/missing.js", ""}).status, 404);
}

TEST(KvDashboardTest, SlowReaderIsDroppedOthersAndTheEngineCarryOn) {
  auto eng = MakeEngine(1000);
  KvDashboard dash(*eng, {.model_name = "fake", .interval = 10ms, .max_queued_events = 3});
  auto reader = std::get<std::shared_ptr<KvEventStream>>(dash.Subscribe());
  auto stalled = std::get<std::shared_ptr<KvEventStream>>(dash.Subscribe());
  int woken = 0;
  reader->Start([&woken] { ++woken; });
  stalled->Start(nullptr);
  engine::RequestHandle h = Add(*eng, {1, 2, 3, 4, 5}, 100);
  std::string events;
  int64_t last_id = 0;
  for (int i = 0; i < 40; ++i) {
    reader->Wait(200ms);
    std::string got;
    EXPECT_FALSE(reader->Pull(&got));
    for (size_t at = 0; (at = got.find("id: ", at)) != std::string::npos; at += 4) {
      const int64_t id = std::stoll(got.substr(at + 4));
      EXPECT_GT(id, last_id);
      last_id = id;
    }
    events += got;
  }
  EXPECT_TRUE(stalled->dropped());
  EXPECT_FALSE(reader->dropped());
  EXPECT_EQ(dash.num_dropped(), 1);
  std::string rest;
  EXPECT_TRUE(stalled->Pull(&rest)) << "a dropped stream is over";
  EXPECT_TRUE(rest.empty());
  EXPECT_GE(last_id, 10);
  EXPECT_GT(woken, 0);
  EXPECT_NE(events.find("data: {\"engine\""), std::string::npos);
  Drain(h);  // the engine finished the request meanwhile
  dash.Stop();
  std::string tail;
  EXPECT_TRUE(reader->Pull(&tail)) << "Stop ends every stream";
}

// All streams together get at most max_events_per_s events a second: beyond
// max_events_per_s * interval streams the interval grows, and the state says so.
TEST(KvDashboardTest, ManyStreamsShareTheEventBudget) {
  auto eng = MakeEngine(1000);
  KvDashboard dash(*eng, {.model_name = "fake", .interval = 10ms, .max_events_per_s = 100});
  EXPECT_EQ(dash.EventInterval(0), 10ms);
  EXPECT_EQ(dash.EventInterval(1), 10ms);
  EXPECT_EQ(dash.EventInterval(4), 40ms);
  EXPECT_EQ(dash.EventInterval(200), 2000ms);
  std::vector<std::shared_ptr<KvEventStream>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::get<std::shared_ptr<KvEventStream>>(dash.Subscribe()));
    streams.back()->Start(nullptr);
  }
  engine::RequestHandle h = Add(*eng, {1, 2, 3, 4, 5}, 100);
  const auto start = std::chrono::steady_clock::now();
  std::string got;
  while (std::chrono::steady_clock::now() - start < 600ms) {
    std::this_thread::sleep_for(20ms);
    for (const std::shared_ptr<KvEventStream>& stream : streams) {
      std::string events;
      EXPECT_FALSE(stream->Pull(&events));
      if (stream == streams[0]) got += events;
    }
  }
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int events = 0;
  for (size_t at = 0; (at = got.find("id: ", at)) != std::string::npos; at += 4) ++events;
  // At most one event per 40 ms (and the one a stream gets on subscribing); a busy machine
  // only makes fewer.
  EXPECT_LE(events, elapsed_s / 0.040 + 2) << "every 10 ms would be ~60";
  EXPECT_GE(events, 1);
  const json s = json::parse(dash.State({"/v1/kv/state", ""}).body);
  EXPECT_EQ(s["events"]["streams"], 4);
  EXPECT_EQ(s["events"]["interval_ms"], 40);
  Drain(h);
}

TEST(KvDashboardTest, TooManyStreamsAre503) {
  auto eng = MakeEngine(0);
  KvDashboard dash(*eng, {.model_name = "fake", .max_subscribers = 2});
  auto a = dash.Subscribe();
  auto b = dash.Subscribe();
  auto c = dash.Subscribe();
  ASSERT_TRUE(std::holds_alternative<DashboardResponse>(c));
  EXPECT_EQ(std::get<DashboardResponse>(c).status, 503);
  a = DashboardResponse{};  // one closes: room again
  EXPECT_TRUE(std::holds_alternative<std::shared_ptr<KvEventStream>>(dash.Subscribe()));
}

}  // namespace
}  // namespace kvserve::server
