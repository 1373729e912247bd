// The live KV dashboard's routes on the real `kvserve serve` binary (the event-driven front of
// src/http/): the page and its files under a strict Content-Security-Policy, /v1/kv/* behind
// --api-key, /v1/kv/events as a real SSE stream, and a stalled stream that neither blocks the
// engine nor the other streams. The browser test (dashboard_browser_test.cc) checks what the
// page shows.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "http_client.h"
#include "raw_client.h"
#include "server_process.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr const char* kKey = "dash-k3y";

// Events ("id: N\ndata: {...}\n\n") in a raw response.
int CountEvents(const std::string& raw) {
  int n = 0;
  for (size_t at = raw.find("\nid: "); at != std::string::npos; at = raw.find("\nid: ", at + 1)) {
    ++n;
  }
  return n;
}

std::string EventsRequest(const std::string& auth) {
  return "GET /v1/kv/events HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n";
}

class DashboardE2eTest : public SharedServerTest<DashboardE2eTest> {
 public:
  static std::vector<std::string> ServerFlags() {
    return {"--served-model-name", "stories", "--api-key", kKey};
  }

 protected:
  static httplib::Headers Auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }
};

TEST_F(DashboardE2eTest, PageAndFilesAreServedUnderAStrictPolicy) {
  for (const char* path : {"/dashboard", "/dashboard/", "/dashboard/index.html"}) {
    Reply r = Get(port(), path);
    ASSERT_EQ(r.status, 200) << path;
    EXPECT_NE(r.raw.find("<html"), std::string::npos) << path;
    EXPECT_EQ(r.headers.find("Content-Type")->second, "text/html; charset=utf-8") << path;
    const std::string csp = r.headers.find("Content-Security-Policy")->second;
    EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
    EXPECT_EQ(csp.find("unsafe"), std::string::npos) << csp;
    EXPECT_EQ(r.headers.find("X-Content-Type-Options")->second, "nosniff");
  }
  Reply js = Get(port(), "/dashboard/dashboard.js");
  ASSERT_EQ(js.status, 200);
  EXPECT_EQ(js.headers.find("Content-Type")->second, "text/javascript; charset=utf-8");
  EXPECT_TRUE(js.headers.contains("Content-Security-Policy"));
  Reply missing = Get(port(), "/dashboard/missing.js");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.body.contains("error")) << missing.raw;
}

TEST_F(DashboardE2eTest, KvRoutesNeedTheApiKey) {
  for (const char* path : {"/v1/kv/state", "/v1/kv/block?group=0&id=1", "/v1/kv/events"}) {
    EXPECT_EQ(Get(port(), path).status, 401) << path;
    EXPECT_EQ(Get(port(), path, {{"Authorization", "Bearer wrong"}}).status, 401) << path;
  }
  Reply state = Get(port(), "/v1/kv/state", Auth());
  ASSERT_EQ(state.status, 200) << state.raw;
  const json& g = state.body["groups"][0]["blocks"];
  EXPECT_EQ(g["used"].get<int64_t>() + g["cached"].get<int64_t>() + g["free"].get<int64_t>(),
            g["total"].get<int64_t>());
  EXPECT_EQ(state.body["model"], "stories");
  Reply block = Get(port(), "/v1/kv/block?group=0&id=1", Auth());
  EXPECT_EQ(block.status, 200) << block.raw;
  EXPECT_EQ(Get(port(), "/v1/kv/block?group=0&id=x", Auth()).status, 400);
  EXPECT_EQ(Get(port(), "/v1/kv/block?group=9&id=1", Auth()).status, 404);
}

TEST_F(DashboardE2eTest, EventsStreamStatesAFewTimesASecond) {
  RawConnection c(port());
  ASSERT_TRUE(c.Send(EventsRequest(std::string("Authorization: Bearer ") + kKey + "\r\n")));
  const std::string raw = c.ReadAll(milliseconds(2000));
  EXPECT_EQ(StatusOf(raw), 200) << raw.substr(0, 300);
  EXPECT_NE(raw.find("Content-Type: text/event-stream"), std::string::npos) << raw.substr(0, 300);
  EXPECT_NE(raw.find("Transfer-Encoding: chunked"), std::string::npos);
  // 4 a second (plus the latest state at once): at least 4 in 2 s on a loaded machine.
  EXPECT_GE(CountEvents(raw), 4) << raw.substr(0, 300);
  EXPECT_NE(raw.find("\ndata: {"), std::string::npos) << raw.substr(0, 300);
  EXPECT_NE(raw.find("\"object\":\"kv.state\""), std::string::npos) << raw.substr(0, 300);
  // One stream is far below --dashboard-events-per-s (200): the shortest interval.
  EXPECT_NE(raw.find("\"interval_ms\":250"), std::string::npos) << raw.substr(0, 300);
}

// A client that opens the stream and never reads costs the server bounded memory (the front
// drops it past its buffer bound, http/http_server.h; KvDashboardTest covers the queue's own
// bound) and meanwhile the engine and the other streams go on at their pace.
TEST_F(DashboardE2eTest, StalledStreamsBlockNeitherTheEngineNorOtherStreams) {
  const std::string auth = std::string("Authorization: Bearer ") + kKey + "\r\n";
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(std::make_unique<RawConnection>(port(), 4096));
    ASSERT_TRUE(stalled.back()->Send(EventsRequest(auth)));
  }
  RawConnection reader(port());
  ASSERT_TRUE(reader.Send(EventsRequest(auth)));
  Reply done =
      Post(port(), "/v1/completions",
           {{"prompt", "Once upon a time"}, {"max_tokens", 32}, {"ignore_eos", true}}, Auth());
  EXPECT_EQ(done.status, 200) << done.raw;
  EXPECT_EQ(done.body["usage"]["completion_tokens"], 32) << done.raw;
  EXPECT_GE(CountEvents(reader.ReadAll(milliseconds(1600))), 4);
}

}  // namespace
}  // namespace kvserve::server::testing
