// The hostile-load suite (issue 19) against the real `kvserve serve` binary on loopback: the
// ten front-door failures a hostile tester found, each as a regression test, and a soak of
// 2,000 concurrent clients against --max-num-seqs 16 --max-waiting-requests 16 (every client
// 200 or 503, no resets, RSS bounded, /health under 1 s throughout).
//
// Short by default (the README's test command). The long version, by hand (docs/reliability.md):
//   KVSERVE_HOSTILE_ROUNDS=20 KVSERVE_HOSTILE_CLIENTS=4000 build/tests/server/server_test
//   --gtest_filter='Hostile*'
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "gguf/gguf.h"
#include "http_client.h"
#include "raw_client.h"
#include "server_process.h"
#include "support/temp_path.h"

namespace kvserve::server::testing {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Latency bounds (/health under 1 s, an immediate 400) are asserted in the release run; under
// ASan + UBSan (several times slower) the same tests check behaviour and memory safety only.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kTimed = false;
#else
constexpr bool kTimed = true;
#endif

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

class HostileTest : public SharedServerTest<HostileTest> {
 public:
  static std::vector<std::string> ServerFlags() {
    return {"--served-model-name",    "stories", "--max-num-seqs",        "16",
            "--max-waiting-requests", "16",      "--http-header-timeout", "1",
            "--http-body-timeout",    "2"};
  }

 protected:
  static void SetUpTestSuite() {
    rlimit limit{};  // thousands of client sockets
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    SharedServerTest::SetUpTestSuite();
  }

  // GET /health on a fresh connection: its latency in seconds, or 99 when it failed.
  double HealthSeconds() {
    const auto t0 = Clock::now();
    RawConnection c(port());
    if (!c.ok() || !c.Send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) {
      return 99;
    }
    return StatusOf(c.ReadResponse(milliseconds(5000))) == 200 ? Seconds(t0) : 99;
  }
  // The server still answers a real completion.
  void ExpectStillServing() {
    Reply r = Post(port(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}});
    EXPECT_EQ(r.status, 200) << r.raw;
  }
};

// 1. A gzip bomb: compressed bodies are refused at the head (415), never inflated.
TEST_F(HostileTest, CompressedBodyIsRefusedNotInflated) {
  RawConnection c(port());
  const std::string body(4096, '\0');  // what follows the head is never read as a body
  ASSERT_TRUE(
      c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n"
             "Content-Length: 4096\r\n\r\n" +
             body));
  const std::string r = c.ReadResponse(milliseconds(5000));
  EXPECT_EQ(StatusOf(r), 415) << r;
  EXPECT_NE(BodyOf(r).find("\"code\":415"), std::string::npos) << r;
  ExpectStillServing();
}

// 2. A chunked body counts against --max-request-body after decoding: 413 once it passes
// 16 MiB, long before the 40 MB the client would send.
TEST_F(HostileTest, ChunkedBodyOverTheLimitIs413) {
  RawConnection c(port());
  ASSERT_TRUE(
      c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "100000\r\n" + std::string(1 << 20, 'a') + "\r\n";  // 1 MiB
  size_t sent_bytes = 0;  // when the answer arrived (socket buffers hold a few MiB more)
  for (int i = 0; i < 40 && !c.Readable(milliseconds(0)) && c.Send(chunk); ++i) {
    sent_bytes += 1 << 20;
  }
  const std::string r = c.ReadResponse(milliseconds(5000));
  EXPECT_EQ(StatusOf(r), 413) << r.substr(0, 300);
  EXPECT_LT(sent_bytes, 32u << 20);
  ExpectStillServing();
}

// 3. Slowloris: 500 half-sent heads and 500 silent connections do not hold /health, and the
// half-sent ones are cut off by the header deadline (408).
TEST_F(HostileTest, SlowConnectionsDoNotStarveHealth) {
  const int n = EnvInt("KVSERVE_HOSTILE_SLOW", 500);
  std::vector<std::unique_ptr<RawConnection>> slow, idle;
  for (int i = 0; i < n; ++i) {
    slow.push_back(std::make_unique<RawConnection>(port()));
    ASSERT_TRUE(slow.back()->ok());
    ASSERT_TRUE(slow.back()->Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le"));
    idle.push_back(std::make_unique<RawConnection>(port()));
  }
  double worst = 0;
  for (int i = 0; i < 10; ++i) worst = std::max(worst, HealthSeconds());
  EXPECT_LT(worst, kTimed ? 1.0 : 30.0);
  // The header deadline is 1 s in this suite: every half-sent request gets 408 and is closed.
  int num_408 = 0;
  for (auto& c : slow) num_408 += StatusOf(c->ReadResponse(milliseconds(5000))) == 408;
  EXPECT_EQ(num_408, n);
  for (auto& c : idle) EXPECT_TRUE(c->PeerClosed(milliseconds(5000)));
  ExpectStillServing();
}

// 4. The listen backlog is SOMAXCONN: 2,000 connections opened at once are all answered.
TEST_F(HostileTest, ConnectionBurstIsAllAnswered) {
  const int n = EnvInt("KVSERVE_HOSTILE_CLIENTS", 2000);
  std::vector<std::string> requests(n,
                                    "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  LoadOutcome out = RunClients(port(), requests, milliseconds(60000));
  EXPECT_EQ(out.num_connect_failures, 0);
  EXPECT_EQ(out.num_resets, 0);
  EXPECT_EQ(out.num_silent, 0);
  for (int status : out.statuses) ASSERT_EQ(status, 200);
}

// 5. A malformed Content-Length is a 400 at once (it held a thread for 65 s before).
TEST_F(HostileTest, MalformedContentLengthIsAnImmediate400) {
  for (const char* length : {"-5", "1180591620717411303424", "12abc", "5, 6"}) {
    const auto t0 = Clock::now();
    RawConnection c(port());
    ASSERT_TRUE(c.Send(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ") +
                       length + "\r\n\r\n"));
    const std::string r = c.ReadResponse(milliseconds(5000));
    EXPECT_EQ(StatusOf(r), 400) << length << ": " << r;
    if (kTimed) {
      EXPECT_LT(Seconds(t0), 0.9) << length;  // well inside the 1 s header deadline
    }
  }
  ExpectStillServing();
}

// 6. `curl -d` sends a form content type: JSON is read whatever the Content-Type, at any size.
TEST_F(HostileTest, FormContentTypeLongTextTokenizes) {
  std::string text;
  while (text.size() < 64 * 1024) text += "Once upon a time there was a cat. ";
  const json body = {{"prompt", text}};
  RawConnection c(port());
  ASSERT_TRUE(c.Send(PostRequest("/tokenize", body.dump(),
                                 "Content-Type: application/x-www-form-urlencoded\r\n")));
  const std::string r = c.ReadResponse(milliseconds(10000));
  ASSERT_EQ(StatusOf(r), 200) << r.substr(0, 300);
  EXPECT_GT(json::parse(BodyOf(r))["count"].get<int>(), 8000);
}

// 7. --api-key '' (an unset $KEY) is a startup error, not "no authentication".
TEST_F(HostileTest, EmptyApiKeyIsAStartupError) {
  ServerProcess s;
  EXPECT_FALSE(s.Start(TestModelPath(), {"--api-key", ""}, 30));
  EXPECT_NE(s.error().find("--api-key"), std::string::npos) << s.error();
}

// 8. CPU amplification: a 15 MB prompt and 14 MB of stop strings are refused before any
// tokenizing or matching (the messages name the byte limits, checked before tokenizing).
TEST_F(HostileTest, HugePromptAndStopStringsAreRefusedBeforeWork) {
  Reply prompt = Post(port(), "/v1/completions",
                      {{"prompt", std::string(15'000'000, 'a')}, {"max_tokens", 4}});
  EXPECT_EQ(prompt.status, 400) << prompt.raw.substr(0, 300);
  EXPECT_NE(prompt.raw.find("bytes long, over the limit"), std::string::npos) << prompt.raw;
  Reply chat =
      Post(port(), "/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", std::string(15'000'000, 'a')}}}}});
  EXPECT_EQ(chat.status, 400) << chat.raw.substr(0, 300);
  json many = json::array();
  for (int i = 0; i < 100'000; ++i) many.push_back(std::string(140, 'a' + i % 26));
  Reply stops = Post(port(), "/v1/completions", {{"prompt", "Hi"}, {"stop", many}});
  EXPECT_EQ(stops.status, 400) << stops.raw.substr(0, 300);
  EXPECT_NE(stops.raw.find("'stop' has 100000 strings"), std::string::npos) << stops.raw;
  Reply long_stop =
      Post(port(), "/v1/completions", {{"prompt", "Hi"}, {"stop", std::string(1'000'000, 'x')}});
  EXPECT_EQ(long_stop.status, 400) << long_stop.raw.substr(0, 300);
  ExpectStillServing();
}

// 9. general.alignment = 1 places tensors at odd addresses: the loader copies them aligned
// (UBSan, in the sanitizer run of this suite, flagged misaligned loads before) and the model
// generates exactly what the original does.
TEST_F(HostileTest, AlignmentOneModelGeneratesLikeTheOriginal) {
  auto original = gguf::GgufFile::Open(TestModelPath());
  ASSERT_TRUE(original.ok());
  gguf::GgufWriter w;
  for (const auto& [key, value] : (*original)->metadata()) w.Set(key, value);
  w.Set("general.alignment", gguf::Value::U32(1));
  for (const gguf::TensorInfo& t : (*original)->tensors()) {
    ASSERT_TRUE(t.dtype.has_value());
    const auto* p = reinterpret_cast<const uint8_t*>(t.data);
    ASSERT_TRUE(
        w.AddTensor(t.name, t.dims, *t.dtype, std::vector<uint8_t>(p, p + t.size_bytes)).ok());
  }
  const std::string path = kvserve::testing::TempPath("stories_align1.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto run = [](const std::string& model) {
    const std::string cmd = std::string(KVSERVE_BINARY_DIR) + "/tools/kvserve generate " + model +
                            " --prompt 'Once upon a time' -n 24 --temp 0 2>/dev/null";
    std::string out;
    FILE* f = popen(cmd.c_str(), "r");
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
    EXPECT_EQ(pclose(f), 0) << cmd;
    return out;
  };
  const std::string expected = run(TestModelPath());
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(run(path), expected);
  std::filesystem::remove(path);
}

// 10. A second SIGTERM exits at once, without waiting out --shutdown-timeout.
TEST_F(HostileTest, SecondSigtermExitsAtOnce) {
  ServerProcess s;
  ASSERT_TRUE(s.Start(TestModelPath(), {"--shutdown-timeout", "60", "--max-num-seqs", "2"}, 60))
      << s.error();
  // Work that takes a while with two sequences at a time, from a client that never reads.
  RawConnection c(s.port(), 4096);
  ASSERT_TRUE(c.Send(PostRequest("/v1/completions", json({{"prompt", "Once"},
                                                          {"max_tokens", 480},
                                                          {"n", 128},
                                                          {"ignore_eos", true},
                                                          {"stream", true},
                                                          {"logprobs", 5}})
                                                        .dump())));
  std::this_thread::sleep_for(milliseconds(200));
  s.Terminate();
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = Clock::now();
  const int code = s.Stop(10);  // the second SIGTERM
  EXPECT_LT(Seconds(t0), 5.0);
  EXPECT_TRUE(code == 0 || code == 1) << code;
}

// The soak: 2,000 concurrent clients (one in four streaming) against 16 running and 16
// waiting: each gets 200 (streams end with [DONE]) or 503, none is reset or left without an
// answer, RSS stays bounded and /health answers within 1 s throughout.
TEST_F(HostileTest, SoakTwoThousandClients) {
  const int num_clients = EnvInt("KVSERVE_HOSTILE_CLIENTS", 2000);
  const int rounds = EnvInt("KVSERVE_HOSTILE_ROUNDS", 1);
  const size_t rss_before = ResidentBytes(server_->pid());
  std::atomic<bool> soaking{true};
  std::atomic<double> worst_health{0};
  std::atomic<size_t> peak_rss{rss_before};
  std::thread prober([&] {
    while (soaking) {
      worst_health = std::max(worst_health.load(), HealthSeconds());
      peak_rss = std::max(peak_rss.load(), ResidentBytes(server_->pid()));
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  std::vector<std::string> requests;
  for (int i = 0; i < num_clients; ++i) {
    json body = {
        {"prompt", "Once upon a time"}, {"max_tokens", 16}, {"seed", i}, {"stream", i % 4 == 0}};
    requests.push_back(PostRequest("/v1/completions", body.dump()));
  }
  int num_ok = 0, num_busy = 0;
  for (int round = 0; round < rounds; ++round) {
    LoadOutcome out = RunClients(port(), requests, milliseconds(120000));
    EXPECT_EQ(out.num_connect_failures, 0);
    EXPECT_EQ(out.num_resets, 0);
    EXPECT_EQ(out.num_silent, 0);
    EXPECT_EQ(out.num_incomplete_streams, 0);
    for (int status : out.statuses) {
      EXPECT_TRUE(status == 200 || status == 503) << status;
      num_ok += status == 200;
      num_busy += status == 503;
    }
  }
  soaking = false;
  prober.join();
  EXPECT_GT(num_ok, 0);
  EXPECT_EQ(num_ok + num_busy, num_clients * rounds);
  EXPECT_LT(worst_health.load(), kTimed ? 1.0 : 30.0);
  EXPECT_LT(peak_rss.load(), rss_before + (512u << 20)) << "RSS before " << rss_before;
  RecordProperty("ok", num_ok);
  RecordProperty("busy", num_busy);
  ExpectStillServing();
}

// A streaming client that never reads is dropped once 1 MiB waits for it; meanwhile the engine
// keeps serving everyone else (its 8 choices leave 8 of the 16 sequences free).
TEST_F(HostileTest, SlowReaderIsDroppedAndNeverBlocksTheEngine) {
  RawConnection slow(port(), 4096);
  ASSERT_TRUE(slow.Send(PostRequest("/v1/completions", json({{"prompt", "Once"},
                                                             {"max_tokens", 480},
                                                             {"n", 8},
                                                             {"ignore_eos", true},
                                                             {"stream", true},
                                                             {"logprobs", 20}})
                                                           .dump())));
  ExpectStillServing();
  ExpectStillServing();
  // Its requests end (dropped, or run to the end while nothing waits on the client)...
  std::string metrics;
  for (int i = 0; i < 1200; ++i) {
    metrics = Get(port(), "/metrics").raw;
    if (MetricValue(metrics, "kvserve:num_requests_in_flight") == 0.0) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(MetricValue(metrics, "kvserve:num_requests_in_flight"), 0.0) << metrics;
  // ... and it was dropped: far less than its ~2.7 MB stream was kept for it.
  const std::string got = slow.ReadAll(milliseconds(5000));
  EXPECT_EQ(got.find("data: [DONE]"), std::string::npos) << "the slow reader was not dropped";
  EXPECT_TRUE(slow.PeerClosed(milliseconds(5000)));
}

}  // namespace
}  // namespace kvserve::server::testing
