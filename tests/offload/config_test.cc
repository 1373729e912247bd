#include "offload/config.h"

#include <gtest/gtest.h>

namespace kvserve::offload {
namespace {

constexpr const char* kFull = R"({
  "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
  "kv_connector_extra_config": {
    "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": "2GiB",
    "blocks_per_chunk": 1, "eviction_policy": "lru",
    "secondary_tiers": [
      {"type": "fs", "root_dir": "/tmp/kv", "n_read_threads": 8, "n_write_threads": 6},
      {"type": "redis", "url": "redis://10.0.0.5:6380/2"}]}})";

TEST(OffloadConfigTest, ParsesTheFullForm) {
  Result<OffloadConfig> c = ParseKvTransferConfig(kFull);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->spec_name, "TieringOffloadingSpec");
  EXPECT_EQ(c->cpu_bytes_to_use, 2ull << 30);
  ASSERT_TRUE(c->file.has_value());
  EXPECT_EQ(c->file->root_dir, "/tmp/kv");
  EXPECT_EQ(c->num_read_threads(), 8);
  EXPECT_EQ(c->num_write_threads(), 6);
  ASSERT_TRUE(c->redis.has_value());
  EXPECT_EQ(c->redis->address.host, "10.0.0.5");
  EXPECT_EQ(c->redis->address.port, 6380);
  EXPECT_EQ(c->redis->address.db, 2);
  EXPECT_NE(c->Describe().find("fs /tmp/kv"), std::string::npos);
}

TEST(OffloadConfigTest, CpuOnlyAndNumericBytes) {
  Result<OffloadConfig> c = ParseKvTransferConfig(
      R"({"kv_connector":"OffloadingConnector",
          "kv_connector_extra_config":{"cpu_bytes_to_use":1048576}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->spec_name, "CPUOffloadingSpec");
  EXPECT_EQ(c->cpu_bytes_to_use, 1048576u);
  EXPECT_FALSE(c->file.has_value());
  EXPECT_FALSE(c->redis.has_value());
}

TEST(OffloadConfigTest, ShorthandSize) {
  Result<OffloadConfig> c = OffloadConfigFromSize("1.5");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cpu_bytes_to_use, 3ull << 29);
  EXPECT_FALSE(OffloadConfigFromSize("0").ok());
  EXPECT_FALSE(OffloadConfigFromSize("-1").ok());
  EXPECT_FALSE(OffloadConfigFromSize("8GiB").ok());
  EXPECT_FALSE(OffloadConfigFromSize("").ok());
}

// Each bad config must fail with InvalidArgument and a message naming the problem.
TEST(OffloadConfigTest, BadConfigsAreClearErrors) {
  const std::string base = R"("kv_connector":"OffloadingConnector")";
  auto extra = [&](const std::string& body) {
    return "{" + base + R"(,"kv_connector_extra_config":{)" + body + "}}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not valid JSON"},
      {"[1]", "JSON object"},
      {R"({"kv_connector":"LMCacheConnector","kv_connector_extra_config":{}})", "LMCache"},
      {"{" + base + R"(,"kv_connector_extra_config":{"cpu_bytes_to_use":1},"x":1})",
       "unknown key 'x'"},
      {"{" + base + "}", "kv_connector_extra_config is required"},
      {extra(R"("cpu_bytes_to_use":1,"cpu_bytes":2)"), "unknown key 'cpu_bytes'"},
      {extra(R"("spec_name":"Foo","cpu_bytes_to_use":1)"), "spec_name 'Foo'"},
      {extra(R"("spec_name":"CPUOffloadingSpec")"), "cpu_bytes_to_use is required"},
      {extra(R"("cpu_bytes_to_use":"lots")"), "cpu_bytes_to_use"},
      {extra(R"("cpu_bytes_to_use":-5)"), "cpu_bytes_to_use"},
      {extra(R"("cpu_bytes_to_use":1,"blocks_per_chunk":0)"), "blocks_per_chunk"},
      {extra(R"("cpu_bytes_to_use":1,"blocks_per_chunk":"1")"), "blocks_per_chunk"},
      {extra(R"("cpu_bytes_to_use":1,"eviction_policy":"fifo")"), "eviction_policy 'fifo'"},
      {extra(R"("cpu_bytes_to_use":1,"secondary_tiers":[{"type":"fs","root_dir":"/x"}])"),
       "needs spec_name TieringOffloadingSpec"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"fs"}])"), "root_dir is required"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"fs","root_dir":"/x","n_read_threads":0}])"),
       "n_read_threads"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"fs","root_dir":"/x","threads":2}])"),
       "unknown key 'threads'"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"s3","root_dir":"/x"}])"), "type 's3'"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"redis","url":"http://x"}])"), "redis://"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":[{"type":"redis","url":"redis://h:99999"}])"), "bad port"},
      {extra(R"("spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":1,
                "secondary_tiers":{"type":"fs"})"), "must be a list"},
  };
  for (const auto& [text, needle] : cases) {
    Result<OffloadConfig> c = ParseKvTransferConfig(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(needle), std::string::npos)
        << "config: " << text << "\nmessage: " << c.status().message();
  }
}

}  // namespace
}  // namespace kvserve::offload
