// Preset data files: every one parses and validates, and every number carries a source.
#include "planner/presets.h"

#include <gtest/gtest.h>

#include <cctype>
#include <sstream>

#include "core/units.h"

namespace kvserve::planner {
namespace {

TEST(Presets, EveryModelPresetParsesAndValidates) {
  const std::vector<std::string> names = ModelPresetNames();
  ASSERT_GE(names.size(), 7u);
  for (const char* expected : {"deepseek-v4.1-flash", "deepseek-v3", "llama-3.1-8b",
                               "llama-3.1-70b", "qwen3-32b", "gemma-3-27b", "gpt-oss-120b"}) {
    Result<ModelDesc> model = LoadModelPreset(expected);
    ASSERT_TRUE(model.ok()) << expected << ": " << model.status().ToString();
    EXPECT_EQ(model->name, expected);
    EXPECT_GT(model->total_weight_bytes, 0u);
    EXPECT_FALSE(model->kv_groups.empty());
  }
}

TEST(Presets, EveryDevicePresetParses) {
  for (const char* name : {"h200", "h100", "b200", "a100-80gb", "l40s", "rtx4090", "cpu"}) {
    Result<DeviceDesc> device = LoadDevicePreset(name);
    ASSERT_TRUE(device.ok()) << name << ": " << device.status().ToString();
    EXPECT_GT(device->memory_bytes, 0u);
  }
  Result<DeviceDesc> h200 = LoadDevicePreset("h200");
  ASSERT_TRUE(h200.ok());
  // The driver's figure, 143771 MiB = 140.40 GiB, not the marketing 141 GB.
  EXPECT_NEAR(static_cast<double>(h200->memory_bytes) / kGiB, 140.4, 0.01);
  EXPECT_TRUE(LoadDevicePreset("cpu")->is_cpu);
}

TEST(Presets, UnknownNamesListTheKnownOnes) {
  Result<ModelDesc> model = LoadModelPreset("no-such-model");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_NE(model.status().message().find("llama-3.1-8b"), std::string::npos);
  Result<DeviceDesc> device = LoadDevicePreset("tpu");
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.status().message().find("h200"), std::string::npos);
}

// A value line ("key": 123 or "key": "12GiB") must say where the number comes from.
bool HasNumericValue(const std::string& line) {
  const size_t colon = line.find("\":");
  if (colon == std::string::npos) return false;
  const std::string value = line.substr(colon + 2, line.find("//") - colon - 2);
  for (char c : value) {
    if (std::isdigit(static_cast<unsigned char>(c))) return true;
  }
  return false;
}

TEST(Presets, EveryNumberHasASourceComment) {
  int checked = 0;
  for (const PresetFile& file : EmbeddedPresetFiles()) {
    std::istringstream in{std::string(file.text)};
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find("\"name\"") != std::string::npos ||
          line.find("\"description\"") != std::string::npos ||
          line.find("\"note\"") != std::string::npos ||
          line.find("\"dtype\"") != std::string::npos ||
          line.find("_dtype\"") != std::string::npos ||
          line.find("_source\"") != std::string::npos) {
        continue;  // names and prose, not quantities
      }
      if (!HasNumericValue(line)) continue;
      ++checked;
      EXPECT_NE(line.find("//"), std::string::npos)
          << file.path << ":" << line_no << " has a number without a source: " << line;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(Presets, RejectsInconsistentFiles) {
  const char* kTwoRests = R"({"name": "x", "num_layers": 1, "max_model_len": 16,
    "runtime_reserve": "0", "weights": {"total": "10", "parts": [
      {"name": "a", "bytes": "rest", "tp": "sharded"},
      {"name": "b", "bytes": "rest", "tp": "sharded"}]},
    "kv": [{"name": "f", "kind": "full_attention", "layers": "0", "kv_heads": 1,
            "head_dim": 32, "dtype": "f16"}]})";
  EXPECT_FALSE(ParseModelPreset(kTwoRests).ok());
  const char* kTooBig = R"({"name": "x", "num_layers": 1, "max_model_len": 16,
    "runtime_reserve": "0", "weights": {"total": "10", "parts": [
      {"name": "a", "bytes": "11", "tp": "sharded"}]},
    "kv": [{"name": "f", "kind": "full_attention", "layers": "0", "kv_heads": 1,
            "head_dim": 32, "dtype": "f16"}]})";
  EXPECT_FALSE(ParseModelPreset(kTooBig).ok());
  const char* kLayerOutOfRange = R"({"name": "x", "num_layers": 1, "max_model_len": 16,
    "runtime_reserve": "0", "weights": {"total": "10", "parts": [
      {"name": "a", "bytes": "rest", "tp": "sharded"}]},
    "kv": [{"name": "f", "kind": "full_attention", "layers": "0-1", "kv_heads": 1,
            "head_dim": 32, "dtype": "f16"}]})";
  EXPECT_FALSE(ParseModelPreset(kLayerOutOfRange).ok());
  EXPECT_FALSE(ParseModelPreset("{ not json").ok());
  EXPECT_FALSE(ParseModelPreset(R"({"name": "x"})").ok());
}

TEST(LayerList, ParsesRangesStepsAndLists) {
  EXPECT_EQ(*ParseLayerList("2,8,14"), (std::vector<int>{2, 8, 14}));
  EXPECT_EQ(*ParseLayerList("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(*ParseLayerList("1-7/2"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(*ParseLayerList("5,0-1"), (std::vector<int>{0, 1, 5}));
  EXPECT_FALSE(ParseLayerList("").ok());
  EXPECT_FALSE(ParseLayerList("3-1").ok());
  EXPECT_FALSE(ParseLayerList("a").ok());
  EXPECT_FALSE(ParseLayerList("1,,2").ok());
  EXPECT_EQ(FormatLayerList({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
  EXPECT_EQ(FormatLayerList({}), "");
}

}  // namespace
}  // namespace kvserve::planner
