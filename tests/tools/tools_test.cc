// End-to-end tests of `kvserve make-model` and `kvserve inspect`: run the built binary, then
// read what it wrote with the GGUF reader.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "server/server_process.h"
#include "tensor/quant.h"
#ifdef KVSERVE_HAVE_TOKENIZER
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"
#endif

namespace kvserve::tools {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

RunResult RunKvserve(const std::string& args) {
  const std::string command = std::string(KVSERVE_BINARY_DIR "/tools/kvserve ") + args + " 2>&1";
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class ToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(KVSERVE_BINARY_DIR "/tools/kvserve"))
        << "build the kvserve target first";
    std::string pattern = (fs::temp_directory_path() / "kvserve_tools_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Runs make-model and returns the file's path.
  std::string MakeTiny(const std::string& type, int seed, const std::string& name) {
    const std::string path = (dir_ / name).string();
    RunResult r = RunKvserve("make-model --preset tiny --type " + type + " --seed " +
                             std::to_string(seed) + " -o " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return path;
  }

  fs::path dir_;
};

void ExpectTinyShapes(const gguf::GgufFile& f, tensor::DType type) {
  EXPECT_EQ(f.GetString("general.architecture").value(), "llama");
  EXPECT_EQ(f.GetInt("llama.embedding_length").value(), 128);
  EXPECT_EQ(f.GetInt("llama.block_count").value(), 4);
  EXPECT_EQ(f.GetInt("llama.attention.head_count").value(), 4);
  EXPECT_EQ(f.GetInt("llama.attention.head_count_kv").value(), 2);
  EXPECT_EQ(f.GetInt("llama.feed_forward_length").value(), 384);
  EXPECT_EQ(f.GetInt("llama.context_length").value(), 2048);
  EXPECT_EQ(f.GetInt("llama.rope.dimension_count").value(), 32);
  EXPECT_FLOAT_EQ(f.GetFloat("llama.attention.layer_norm_rms_epsilon").value(), 1e-5);
  EXPECT_EQ(f.tensors().size(), 2u + 4u * 9u + 1u);
  struct Expected {
    const char* name;
    std::vector<int64_t> dims;
    bool is_norm;
  };
  for (const Expected& e : std::vector<Expected>{{"token_embd.weight", {128, 512}, false},
                                                 {"blk.0.attn_norm.weight", {128}, true},
                                                 {"blk.3.attn_q.weight", {128, 128}, false},
                                                 {"blk.1.attn_k.weight", {128, 64}, false},
                                                 {"blk.1.attn_v.weight", {128, 64}, false},
                                                 {"blk.2.attn_output.weight", {128, 128}, false},
                                                 {"blk.2.ffn_norm.weight", {128}, true},
                                                 {"blk.0.ffn_gate.weight", {128, 384}, false},
                                                 {"blk.0.ffn_up.weight", {128, 384}, false},
                                                 {"blk.0.ffn_down.weight", {384, 128}, false},
                                                 {"output_norm.weight", {128}, true},
                                                 {"output.weight", {128, 512}, false}}) {
    const gguf::TensorInfo* t = f.FindTensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dims, e.dims) << e.name;
    ASSERT_TRUE(t->dtype.has_value()) << e.name;
    EXPECT_EQ(*t->dtype, e.is_norm ? tensor::DType::kF32 : type) << e.name;
  }
}

void ExpectTinyVocab(const gguf::GgufFile& f) {
  EXPECT_EQ(f.GetString("tokenizer.ggml.model").value(), "llama");
  std::vector<std::string> tokens = f.GetStringArray("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  EXPECT_EQ(tokens[259], "\xE2\x96\x81");
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), tokens.size());
  std::vector<int64_t> types = f.GetIntArray("tokenizer.ggml.token_type").value();
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[100], 6);
  EXPECT_EQ(types[300], 1);
  std::vector<double> scores = f.GetFloatArray("tokenizer.ggml.scores").value();
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_GT(scores[260], scores[400]);  // earlier (shorter, commoner) pieces score higher
  EXPECT_EQ(f.GetInt("tokenizer.ggml.bos_token_id").value(), 1);
  EXPECT_EQ(f.GetInt("tokenizer.ggml.eos_token_id").value(), 2);
  EXPECT_EQ(f.GetInt("tokenizer.ggml.unknown_token_id").value(), 0);
  EXPECT_TRUE(f.GetBool("tokenizer.ggml.add_bos_token").value());
  EXPECT_FALSE(f.GetBool("tokenizer.ggml.add_eos_token").value());
#ifdef KVSERVE_HAVE_TOKENIZER
  auto vocab = tokenizer::Vocab::FromGguf(f);
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  EXPECT_EQ((*vocab)->num_tokens(), 512);
  EXPECT_EQ((*vocab)->bos_id(), 1);
  // Text round-trips; common words are single pieces; other bytes fall back to <0xXX>.
  auto tok = tokenizer::Tokenizer::FromGguf(f);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = "Once upon a time, the cat said \xC3\xA9!";
  std::vector<int32_t> ids = tok->Encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);  // BOS
  EXPECT_EQ(tok->Decode(ids, {.remove_special = true}), text);
  EXPECT_LT(ids.size(), text.size());
#endif
}

// Weights are finite, varied and within the init bound sqrt(3 / fan_in) (plus rounding).
void ExpectSaneWeights(const gguf::GgufFile& f, const char* name, float bound) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  ASSERT_NE(t, nullptr);
  const int64_t row = t->dims[0];
  std::vector<float> values(row);
  tensor::DequantizeRow(*t->dtype, t->data, values.data(), row);
  std::set<float> distinct(values.begin(), values.end());
  EXPECT_GT(distinct.size(), 8u) << name;
  for (float v : values) {
    ASSERT_TRUE(std::isfinite(v)) << name;
    EXPECT_LE(std::fabs(v), bound * 1.01f) << name;
  }
}

TEST_F(ToolsTest, MakeModelTinyInEveryType) {
  for (auto [name, type, file_type] :
       std::vector<std::tuple<std::string, tensor::DType, int64_t>>{
           {"f32", tensor::DType::kF32, 0},
           {"f16", tensor::DType::kF16, 1},
           {"q8_0", tensor::DType::kQ8_0, 7},
           {"q4_0", tensor::DType::kQ4_0, 2}}) {
    SCOPED_TRACE(name);
    const std::string path = MakeTiny(name, 1, "tiny-" + name + ".gguf");
    auto file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ((*file)->GetInt("general.file_type").value(), file_type);
    ExpectTinyShapes(**file, type);
    ExpectTinyVocab(**file);
    ExpectSaneWeights(**file, "blk.0.attn_q.weight", std::sqrt(3.0f / 128));
    ExpectSaneWeights(**file, "blk.0.ffn_down.weight", std::sqrt(3.0f / 384));
  }
}

// llama.cpp's quantize mixes (model/quant_mix.h; tests/model/quant_mix_test.cc compares them with
// llama.cpp itself): the file type, the mixed tensor types of the tiny preset (whose 128-value
// rows send the K types to their 32-value fallbacks), and a load-and-generate in kvserve.
TEST_F(ToolsTest, MakeModelWritesLlamaCppMixes) {
  for (auto [name, file_type, attn_q, attn_v2] :
       std::vector<std::tuple<std::string, int64_t, std::string, std::string>>{
           {"q4_k_m", 15, "q5_0", "q8_0"},
           {"q6_k", 18, "q8_0", "q8_0"},
           {"q3_k_m", 12, "q4_0", "q5_0"},
           {"q2_k", 10, "q4_0", "q4_0"},
           {"iq4_xs", 30, "iq4_nl", "iq4_nl"},
           {"q5_1", 9, "q5_1", "q5_1"}}) {
    SCOPED_TRACE(name);
    const std::string path = MakeTiny(name, 1, "tiny-" + name + ".gguf");
    auto file = gguf::GgufFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ((*file)->GetInt("general.file_type").value(), file_type);
    auto type_of = [&](const std::string& tensor) {
      const gguf::TensorInfo* t = (*file)->FindTensor(tensor);
      return t != nullptr && t->dtype ? std::string(tensor::DTypeName(*t->dtype)) : "?";
    };
    EXPECT_EQ(type_of("blk.0.attn_q.weight"), attn_q);
    EXPECT_EQ(type_of("blk.2.attn_v.weight"), attn_v2);
    EXPECT_EQ(type_of("output.weight"), "q8_0");  // Q6_K's fallback for 128-value rows
    EXPECT_EQ(type_of("blk.0.attn_norm.weight"), "f32");
    RunResult r = RunKvserve("generate " + path + " -p \"Once upon a time\" -n 4 --temp 0");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

TEST_F(ToolsTest, MakeModelIsDeterministicPerSeed) {
  const std::string a = ReadBytes(MakeTiny("q8_0", 7, "a.gguf"));
  const std::string b = ReadBytes(MakeTiny("q8_0", 7, "b.gguf"));
  const std::string c = ReadBytes(MakeTiny("q8_0", 8, "c.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());  // same layout, other weights
  EXPECT_NE(a, c);
}

TEST_F(ToolsTest, MakeModelRejectsBadArguments) {
  EXPECT_NE(RunKvserve("make-model --preset huge -o " + (dir_ / "x.gguf").string()).exit_code, 0);
  RunResult bad_type = RunKvserve("make-model --type q4_k_x -o " + (dir_ / "x.gguf").string());
  EXPECT_NE(bad_type.exit_code, 0);
  EXPECT_NE(bad_type.output.find("q4_k_m"), std::string::npos) << bad_type.output;  // lists types
  EXPECT_NE(RunKvserve("make-model --preset tiny").exit_code, 0);  // no -o
  RunResult r = RunKvserve("make-model --preset tiny -o " + (dir_ / "no/such/dir.gguf").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
}

TEST_F(ToolsTest, InspectPrintsTensorsParametersAndKvCost) {
  const std::string path = MakeTiny("f16", 1, "tiny.gguf");
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok());
  int64_t num_params = 0;
  for (const auto& t : (*file)->tensors()) num_params += t.NumElements();
  EXPECT_EQ(num_params, 918656);

  RunResult r = RunKvserve("inspect " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parameters: 918656"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("blk.3.ffn_down.weight"), std::string::npos);
  EXPECT_NE(r.output.find("[string x 512]"), std::string::npos);
  // f16 matrices -> f16 KV ("auto"): 2 x 4 layers x 2 KV heads x 32 head dim x 2 B = 1024 B.
  EXPECT_NE(r.output.find("KV cache per token: 2 (K,V) x 4 layers x 2 kv heads x 32 dims x 2 B "
                          "= 1024 B"),
            std::string::npos)
      << r.output;

  // A budget: 1 MiB + 100 B; blocks of 16 x 1024 B; one null block.
  //   usable = 1048676 - 16384 = 1032292 B; M = 128 blocks x 16384 B (2048 tokens) = 2097152 B
  //   blocks = floor(1032292 x 128 / 2097152) + 1 = 63 + 1 = 64; tokens = 63 x 16 = 1008;
  //   concurrency = 1032292 / 2097152 = 0.49 < 1, so serve (and inspect) lower max-model-len
  //   to the longest request that fits: 63 blocks = 1008 tokens.
  r = RunKvserve("inspect --kv-cache-memory-bytes 1048676 " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("64 blocks x 16384 B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KV cache: 1008 tokens (block size 16)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max concurrency at max-model-len 1008: 1.00"), std::string::npos)
      << r.output;
  r = RunKvserve("inspect --kv-cache-memory-bytes 64MiB --max-model-len 512 --block-size 32 " +
                 path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Blocks of 32 x 1024 B = 32 KiB: C = (64 MiB - 32 KiB) / (16 blocks x 32 KiB) = 127.94;
  // blocks = floor((64 MiB - 32 KiB) / 32 KiB) + 1 = 2048; tokens = 2047 x 32 = 65504.
  EXPECT_NE(r.output.find("max concurrency at max-model-len 512: 127.94"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("KV cache: 65504 tokens (block size 32)"), std::string::npos)
      << r.output;

  r = RunKvserve("inspect --json --kv-cache-dtype q8_0 " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["num_params"], 918656);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["tensors"].size(), 39u);
  EXPECT_EQ(j["kv_per_token"]["bytes"], 4 * 2 * 68);  // 64 values of q8_0 = 2 blocks = 68 B
  ASSERT_TRUE(j["kv_cache"].is_object()) << r.output;
  EXPECT_EQ(j["kv_cache"]["groups"][0]["block_bytes"], 16 * 4 * 2 * 68);
  EXPECT_EQ(j["kv_cache"]["max_model_len"], 2048);

  for (const char* bad : {"--kv-cache-dtype q5_k", "--block-size 3", "--kv-cache-memory-bytes 0",
                          "--kv-cache-memory-bytes lots"}) {
    r = RunKvserve(std::string("inspect ") + bad + " " + path);
    EXPECT_EQ(r.exit_code, 1) << bad << r.output;
    EXPECT_NE(r.output.find("error: inspect"), std::string::npos) << bad << r.output;
  }
}

// kvserve-v41: the hybrid's per-group formulas and the seed's 890 B per token for the flash
// shape (a metadata-only file), and a budget's blocks for the weighted mini model.
TEST_F(ToolsTest, InspectV41Models) {
  const std::string flash = (dir_ / "flash.gguf").string();
  RunResult r = RunKvserve("make-model --arch kvserve-v41 --preset v41-flash-shape -o " + flash);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunKvserve("inspect --kv-cache-memory-bytes 4GiB " + flash);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("KV cache per token: 534 B (latent/2) + 356 B (latent/1) = 890 B"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("1 (K=V) x 40 layers x 528 B"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KV cache: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max concurrency at max-model-len "), std::string::npos) << r.output;

  const std::string mini = (dir_ / "mini.gguf").string();
  r = RunKvserve("make-model --arch kvserve-v41 --preset mini -o " + mini);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunKvserve("inspect --json --kv-cache-memory-bytes 8MiB " + mini);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  const nlohmann::json& kv = j["kv_cache"];
  ASSERT_EQ(kv["groups"].size(), 3u) << r.output;
  EXPECT_EQ(kv["groups"][0]["name"], "window");
  EXPECT_EQ(kv["groups"][1]["name"], "latent/2");
  EXPECT_EQ(kv["groups"][2]["name"], "latent/1");
  EXPECT_EQ(kv["max_model_len"], 2048);
  int64_t arena = 0;
  for (const auto& g : kv["groups"]) {
    EXPECT_EQ(g["arena_bytes"].get<int64_t>(),
              g["num_blocks"].get<int64_t>() * g["block_bytes"].get<int64_t>());
    arena += g["arena_bytes"].get<int64_t>();
  }
  EXPECT_EQ(kv["total_arena_bytes"].get<int64_t>(), arena);
  EXPECT_LE(arena, 8 << 20);
  EXPECT_GT(kv["num_tokens"].get<int64_t>(), 0);
}

TEST_F(ToolsTest, InspectRejectsBadFiles) {
  const fs::path garbage = dir_ / "garbage.gguf";
  {
    std::ofstream out(garbage, std::ios::binary);
    out << "this is not a gguf file at all, just some text";
  }
  RunResult r = RunKvserve("inspect " + garbage.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("error: inspect"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GGUF"), std::string::npos) << r.output;

  // A truncated model.
  const std::string good = ReadBytes(MakeTiny("f32", 1, "good.gguf"));
  const fs::path truncated = dir_ / "truncated.gguf";
  {
    std::ofstream out(truncated, std::ios::binary);
    out.write(good.data(), static_cast<std::streamsize>(good.size() / 2));
  }
  r = RunKvserve("inspect " + truncated.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;

  r = RunKvserve("inspect " + (dir_ / "missing.gguf").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing.gguf"), std::string::npos) << r.output;
}

// A BPE vocabulary whose tokenizer.ggml.pre kvserve does not know is refused when the model
// loads, naming the pre-tokenizer (llama.cpp refuses it too), and nothing is served or
// generated. The file is make-model's llama3-tiny with "llama-bpe" renamed in place.
TEST_F(ToolsTest, UnknownPreTokenizerIsAClearError) {
  const std::string path = (dir_ / "llama3.gguf").string();
  RunResult made = RunKvserve("make-model --preset llama3-tiny --type q8_0 -o " + path);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::string bytes = ReadBytes(path);
  const size_t key = bytes.find("tokenizer.ggml.pre");
  ASSERT_NE(key, std::string::npos);
  const size_t value = bytes.find("llama-bpe", key);
  ASSERT_NE(value, std::string::npos);
  bytes.replace(value, 9, "llama-xyz");  // same length: the layout is unchanged
  const std::string patched = (dir_ / "unknown_pre.gguf").string();
  std::ofstream(patched, std::ios::binary) << bytes;
  for (const std::string& args :
       {"generate " + patched + " -p hello -n 2", "serve " + patched + " --port 0"}) {
    SCOPED_TRACE(args);
    RunResult r = RunKvserve(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("unknown BPE pre-tokenizer tokenizer.ggml.pre = 'llama-xyz'"),
              std::string::npos)
        << r.output;
  }
}

// `generate --json` prints each token's logprob (the sampler computes it only when asked):
// real, negative log-probabilities, and top_logprobs only with --logprobs.
TEST(GenerateTest, JsonLinesCarryLogprobs) {
  const std::string model = server::testing::TestModelPath();
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K.gguf is absent";
  RunResult r = RunKvserve("generate " + model +
                           " --prompt 'Once upon a time' -n 4 --json --seed 1 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int lines = 0, negative = 0;
  for (size_t start = 0, end; (end = r.output.find('\n', start)) != std::string::npos;
       start = end + 1) {
    const nlohmann::json j =
        nlohmann::json::parse(r.output.substr(start, end - start), nullptr, false);
    if (j.is_discarded() || !j.contains("logprob")) continue;
    ++lines;
    EXPECT_LE(j["logprob"].get<double>(), 0.0) << j.dump();
    if (j["logprob"].get<double>() < 0.0) ++negative;
    EXPECT_TRUE(j["top_logprobs"].empty()) << j.dump();
  }
  EXPECT_EQ(lines, 4) << r.output;
  EXPECT_GT(negative, 0) << "no logprob computed: " << r.output;
}

// A new user's `kvserve serve MODEL` runs on every core (EngineConfig's default), and says so.
TEST(ServeDefaultsTest, ServeUsesEveryCoreByDefault) {
  const std::string model = server::testing::TestModelPath();
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K.gguf is absent";
  server::testing::ServerProcess server;
  ASSERT_TRUE(server.Start(model, {}, 30)) << server.error() << server.Log();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_NE(server.Log().find(", " + std::to_string(cores) + " threads, "), std::string::npos)
      << server.Log();
  EXPECT_EQ(server.Stop(10), 0);
}

// The engine flags are one declaration and one parser: a bad value is the same clear error
// for every command that takes it, before any model is opened.
TEST(EngineFlagsTest, BadValuesAreTheSameErrorEverywhere) {
  const std::string model = "/nonexistent/model.gguf";  // flags fail first
  const std::vector<std::string> commands = {"serve " + model, "bench throughput " + model,
                                             "generate " + model + " -p x", "inspect " + model};
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"--kv-cache-memory-bytes 0", "--kv-cache-memory-bytes must be greater than 0"},
           {"--kv-cache-memory-bytes lots", "lots"},
           {"--block-size 3", "block"},
           {"--kv-cache-dtype fp7", "fp7"},
           {"--max-model-len -4", "--max-model-len must be at least 1"}}) {
    for (const std::string& command : commands) {
      RunResult r = RunKvserve(command + " " + flag);
      EXPECT_EQ(r.exit_code, 1) << command << " " << flag << ": " << r.output;
      EXPECT_NE(r.output.find(message), std::string::npos) << command << " " << flag << ": "
                                                           << r.output;
      EXPECT_EQ(r.output.find("No such file"), std::string::npos) << r.output;
    }
  }
}

// `kvserve bench serve --shared-prefix-len` against the real server: every prompt shares its
// first 48 tokens, so after the first request the server's prefix cache serves them (3 blocks
// of 16 per later request), and the benchmark reports it from the usage chunks.
TEST(BenchServeTest, SharedPrefixIsServedFromThePrefixCache) {
  const std::string model = server::testing::TestModelPath();
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K.gguf is absent";
  server::testing::ServerProcess server;
  ASSERT_TRUE(server.Start(model, {"--threads", "1"}, 30)) << server.error() << server.Log();
  const std::string base =
      "bench serve --base-url http://127.0.0.1:" + std::to_string(server.port()) +
      " --num-prompts 4 --concurrency 1 --input-len 64 --output-len 4 --random-vocab 500";
  RunResult shared = RunKvserve(base + " --shared-prefix-len 48");
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  EXPECT_NE(shared.output.find("Successful requests:             4/4"), std::string::npos)
      << shared.output;
  EXPECT_NE(shared.output.find("Prefix-cached input tokens:      144 "), std::string::npos)
      << shared.output;
  RunResult distinct = RunKvserve(base + " --seed 9");
  ASSERT_EQ(distinct.exit_code, 0) << distinct.output;
  EXPECT_NE(distinct.output.find("Prefix-cached input tokens:      0 "), std::string::npos)
      << distinct.output;
  RunResult bad = RunKvserve(base + " --shared-prefix-len -1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--shared-prefix-len"), std::string::npos) << bad.output;
  EXPECT_EQ(server.Stop(10), 0);
}

}  // namespace
}  // namespace kvserve::tools
