// The compat suite (ctest label `compat`): kvserve against llama.cpp itself
// (node-llama-cpp@3.21.1's prebuilt CPU build), on every model and vocabulary of compat_cases.h.
//
// Logprobs: kvserve generates from a prompt (`generate --json --logprobs 20`, greedy and
// sampled), then llama.cpp is teacher-forced on prompt + those tokens and both next-token
// distributions are compared at every generated position (compare.h): the same top-1 wherever
// llama.cpp's top-1 beats its top-2 by more than 1e-3, and max |logprob difference| over each
// side's top-5 within the case's bound. Each case writes its table row to
// build/compat-results/<case>.md (docs/models.md).
//
// Tokenization: kvserve's tokenizer and llama.cpp's model.tokenize on the 46 strings of
// ../shared/tokenizers/*.inp, for every vocabulary the tests build and the real ones.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "compat/anchor.h"
#include "compat/compat_cases.h"
#include "gguf/gguf.h"
#include "tokenizer/test_data.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::compat {

// Test names and parameter printouts show the case name (not the struct's bytes).
void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}
void PrintTo(const VocabCase& c, std::ostream* os) {
  *os << c.name;
}

namespace {

namespace fs = std::filesystem;

constexpr int kNumGenerated = 32;
constexpr int kKvserveTopK = 20;  // more than the 5 compared, so near-ties at rank 5 are covered

// The trajectories each model is compared on: a greedy continuation and a sampled one (which
// does not loop, so it visits more varied contexts). The logprobs compared are always those
// of the raw distribution; sampling only picks the path.
struct Trajectory {
  const char* prompt;
  const char* sampling;
};
constexpr Trajectory kTrajectories[] = {
    {"Once upon a time", "--temp 0"},
    {"The little dog ran to the", "--temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 7"},
};

// Resolves a case's source to a file: writes make-model's, or finds ../shared's (an empty
// path and a skip message when absent).
Result<std::string> ResolveModel(std::string_view source, const std::string& dir,
                                 std::string& skip) {
  constexpr std::string_view kShared = "shared:", kMake = "make-model ";
  if (source.starts_with(kShared)) {
    const std::string path = SharedPath(std::string(source.substr(kShared.size())));
    if (!fs::exists(path)) skip = "shared test data absent: " + path;
    return path;
  }
  CHECK(source.starts_with(kMake)) << source;
  const std::string path = dir + "/model.gguf";
  KV_RETURN_IF_ERROR(RunKvserve(std::string(source) + " -o " + path, dir).status());
  return path;
}

// Writes `to`: `from` with every BF16 tensor widened to F32 (exact: a bf16 is the top half of
// an f32), metadata and every other tensor as they are.
Status WidenBf16(const std::string& from, const std::string& to) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(from));
  gguf::GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) writer.Set(key, value);
  for (const gguf::TensorInfo& t : file->tensors()) {
    if (!t.dtype) return InvalidArgument("WidenBf16: tensor " + t.name + " has no kvserve type");
    const auto* bytes = reinterpret_cast<const uint8_t*>(t.data);
    std::vector<uint8_t> data(bytes, bytes + t.size_bytes);
    tensor::DType type = *t.dtype;
    if (type == tensor::DType::kBF16) {
      data.assign(static_cast<size_t>(t.NumElements()) * 4, 0);
      for (int64_t i = 0; i < t.NumElements(); ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        const uint32_t widened = uint32_t{h} << 16;
        std::memcpy(data.data() + 4 * i, &widened, 4);
      }
      type = tensor::DType::kF32;
    }
    KV_RETURN_IF_ERROR(writer.AddTensor(t.name, t.dims, type, std::move(data)));
  }
  return writer.Write(to);
}

Result<tokenizer::Tokenizer> LoadTokenizer(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<gguf::GgufFile> file, gguf::GgufFile::Open(path));
  return tokenizer::Tokenizer::FromGguf(*file);
}

nlohmann::json Ids(const std::vector<TokenLogprob>& list, size_t n) {
  nlohmann::json ids = nlohmann::json::array();
  for (size_t i = 0; i < std::min(n, list.size()); ++i) ids.push_back(list[i].id);
  return ids;
}

std::vector<TokenLogprob> ParseAnchorList(const nlohmann::json& list) {
  std::vector<TokenLogprob> out;
  for (const nlohmann::json& pair : list) {
    TokenLogprob t{pair.at(0).get<int32_t>(), std::nullopt};
    if (pair.at(1).is_number()) t.logprob = pair.at(1).get<double>();
    out.push_back(t);
  }
  return out;
}

// kvserve's side for every trajectory, then one llama.cpp run teacher-forced on all of them.
// llama.cpp runs `anchor_model` (the same file, or its widened copy).
Result<std::vector<PositionLogprobs>> CollectPositions(const ModelCase& c, const std::string& model,
                                                       const std::string& anchor_model,
                                                       const std::string& dir) {
  KV_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, LoadTokenizer(model));
  // One thread on each side: ctest runs two tests at once on CI's 2 cores, and a pool that
  // waits on a descheduled worker is slow on a loaded machine (kvserve's results do not
  // depend on the thread count).
  nlohmann::json job = {{"model", anchor_model},
                        {"threads", 1},
                        {"top_k", 5},
                        {"kv_type", std::string(c.kv_dtype) == "f32" ? "F32" : "F16"},
                        {"flash_attention", false},
                        {"sequences", nlohmann::json::array()}};
  std::vector<PositionLogprobs> positions;
  for (const Trajectory& t : kTrajectories) {
    KV_ASSIGN_OR_RETURN(
        std::string out,
        RunKvserve(fmt::format("generate {} --prompt '{}' -n {} {} --ignore-eos --json "
                               "--logprobs {} --kv-cache-dtype {} --threads 1 {}",
                               model, t.prompt, kNumGenerated, t.sampling, kKvserveTopK, c.kv_dtype,
                               c.generate_flags),
                   dir));
    KV_ASSIGN_OR_RETURN(std::vector<GeneratedToken> generated, ParseGenerateJson(out));
    if (generated.size() != kNumGenerated) return Internal("generate printed too few tokens");
    std::vector<int32_t> tokens = tok.Encode(t.prompt, {.add_special = true});
    const size_t first = tokens.size();
    nlohmann::json lookup = nlohmann::json::array();
    for (const GeneratedToken& g : generated) {
      tokens.push_back(g.id);
      lookup.push_back(Ids(g.top, 5));
      PositionLogprobs p;
      p.kvserve_top = g.top;
      positions.push_back(std::move(p));
    }
    job["sequences"].push_back({{"tokens", tokens}, {"first", first}, {"lookup", lookup}});
  }
  KV_ASSIGN_OR_RETURN(nlohmann::json result, RunAnchor("logprobs", job, dir));
  size_t index = 0;
  for (const nlohmann::json& sequence : result.at("sequences")) {
    for (const nlohmann::json& p : sequence.at("positions")) {
      if (index >= positions.size()) return Internal("llama.cpp returned too many positions");
      positions[index].llama_top = ParseAnchorList(p.at("top"));
      positions[index++].llama_lookup = ParseAnchorList(p.at("lookup"));
    }
  }
  if (index != positions.size()) return Internal("llama.cpp returned too few positions");
  return positions;
}

nlohmann::json ListJson(const std::vector<TokenLogprob>& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprob& t : list)
    out.push_back({t.id, t.logprob ? nlohmann::json(*t.logprob) : nullptr});
  return out;
}

// build/compat-results/<case>.md: the docs/models.md row; <case>.json: every position's
// numbers on both sides, to look into a difference.
void WriteResults(const ModelCase& c, std::span<const PositionLogprobs> positions,
                  const Comparison& result, int flips) {
  const std::string dir = std::string(KVSERVE_BINARY_DIR) + "/compat-results";
  fs::create_directories(dir);
  nlohmann::json all = nlohmann::json::array();
  for (const PositionLogprobs& p : positions) {
    all.push_back({{"kvserve_top", ListJson(p.kvserve_top)},
                   {"llama_top", ListJson(p.llama_top)},
                   {"llama_lookup", ListJson(p.llama_lookup)}});
  }
  std::ofstream(dir + "/" + c.name + ".json") << all.dump(1);
  std::ofstream(dir + "/" + c.name + ".md")
      << "| " << c.name << " | " << c.kv_dtype << " " << SummaryCells(result) << " "
      << fmt::format("{:.2g} |", c.bound) << (result.IsVacuous() ? " vacuous" : "")
      << (flips > 0 ? fmt::format(" {} routing flips left out", flips) : "") << " |\n";
}

// The positions the checks apply to: all of them, less (for a mixture of experts) up to
// c.routing_flips positions whose own max |logprob difference| exceeds the bound. `flips`
// counts the positions left out.
std::vector<PositionLogprobs> WithoutRoutingFlips(const ModelCase& c,
                                                  const std::vector<PositionLogprobs>& positions,
                                                  const CompareOptions& options, int& flips) {
  flips = 0;
  std::vector<PositionLogprobs> kept;
  for (const PositionLogprobs& p : positions) {
    if (flips < c.routing_flips && Compare({&p, 1}, options).max_abs_diff > c.bound) {
      ++flips;
      continue;
    }
    kept.push_back(p);
  }
  return kept;
}

class LogprobsTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(LogprobsTest, MatchLlamaCpp) {
  const ModelCase& c = GetParam();
  if (std::optional<std::string> why = AnchorUnavailableReason()) GTEST_SKIP() << *why;
  TempDir dir;
  std::string skip;
  Result<std::string> model = ResolveModel(c.source, dir.path(), skip);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  if (!skip.empty()) GTEST_SKIP() << skip;
  std::string anchor_model = *model;
  if (c.anchor_widened) {
    anchor_model = dir.path() + "/widened.gguf";
    const Status widened = WidenBf16(*model, anchor_model);
    ASSERT_TRUE(widened.ok()) << widened.ToString();
  }
  Result<std::vector<PositionLogprobs>> positions =
      CollectPositions(c, *model, anchor_model, dir.path());
  ASSERT_TRUE(positions.ok()) << positions.status().ToString();
  // Quantized types: both sides quantize activations, each its own way, so a logprob may
  // legitimately differ by up to the bound: the top-1 is required where the margin exceeds
  // twice that (1e-3 for float weights, as issue 14 says).
  const CompareOptions options{.decisive_margin = std::max(1e-3, 2 * c.bound)};
  int flips = 0;
  const std::vector<PositionLogprobs> checked = WithoutRoutingFlips(c, *positions, options, flips);
  const Comparison result = Compare(checked, options);
  WriteResults(c, *positions, result, flips);
  std::printf("[ compat   ] %s kv %s %s bound %.2g%s (%d routing flips left out)\n", c.name,
              c.kv_dtype, SummaryCells(result).c_str(), c.bound,
              result.IsVacuous() ? " (every position near-certain: top-1 check vacuous)" : "",
              flips);
  for (const std::string& f : result.failures) ADD_FAILURE() << c.name << ": " << f;
  EXPECT_EQ(result.num_positions + flips,
            kNumGenerated * static_cast<int>(std::size(kTrajectories)));
  EXPECT_GE(result.num_values, result.num_positions);
  EXPECT_LE(result.max_abs_diff, c.bound)
      << c.name << ": worst at position " << result.worst_position << ", token "
      << result.worst_token;
}

INSTANTIATE_TEST_SUITE_P(Models, LogprobsTest, ::testing::ValuesIn(kModelCases),
                         [](const auto& info) { return std::string(info.param.name); });

class TokenizeTest : public ::testing::TestWithParam<VocabCase> {};

TEST_P(TokenizeTest, MatchesLlamaCpp) {
  const VocabCase& c = GetParam();
  if (std::optional<std::string> why = AnchorUnavailableReason()) GTEST_SKIP() << *why;
  const std::string strings_file = SharedPath("tokenizers/ggml-vocab-llama-spm.gguf");
  if (!fs::exists(strings_file + ".inp"))
    GTEST_SKIP() << "shared test data absent: " << strings_file;
  TempDir dir;
  std::string skip;
  Result<std::string> model = ResolveModel(c.source, dir.path(), skip);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  if (!skip.empty()) GTEST_SKIP() << skip;
  Result<tokenizer::Tokenizer> tok = LoadTokenizer(*model);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();

  nlohmann::json texts = nlohmann::json::array();
  for (const auto& v : tokenizer::testing::ReadVocabVectors(strings_file)) texts.push_back(v.text);
  ASSERT_EQ(texts.size(), 46u);
  Result<nlohmann::json> llama =
      RunAnchor("tokenize", {{"model", *model}, {"texts", texts}, {"special", false}}, dir.path());
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  int num_equal = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const std::vector<int32_t> ours = tok->Encode(text, {.add_special = false});
    const std::vector<int32_t> theirs = llama->at("ids").at(i).get<std::vector<int32_t>>();
    if (ours == theirs) {
      ++num_equal;
    } else {
      ADD_FAILURE() << c.name << ": '" << text << "'\n  llama.cpp " << nlohmann::json(theirs)
                    << "\n  kvserve   " << nlohmann::json(ours);
    }
  }
  std::printf("[ compat   ] %s: %d/%zu strings tokenize as llama.cpp does\n", c.name, num_equal,
              texts.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, TokenizeTest, ::testing::ValuesIn(kVocabCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvserve::compat
