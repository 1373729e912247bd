// Shared helpers for the tokenizer tests: locating /work/shared data and reading llama.cpp's
// .inp/.out test-vector files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvserve::tokenizer::testing {

inline std::string SharedPath(const std::string& relative) {
  return std::string(KVSERVE_SHARED_DIR) + "/" + relative;
}

inline bool SharedFileExists(const std::string& relative) {
  return std::filesystem::exists(SharedPath(relative));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One test string and the token ids llama.cpp gives it (no BOS).
struct VocabVector {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads X.inp / X.out the way llama.cpp's test-tokenizer-0 does: the .inp holds strings
// separated by "\n__ggml_vocab_test__\n" (the file ends with one, so a string's own trailing
// newlines are kept); the .out holds one line of space-separated ids per string. Returns an
// empty vector when the counts differ.
inline std::vector<VocabVector> ReadVocabVectors(const std::string& gguf_path) {
  const std::string raw = ReadFile(gguf_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(gguf_path + ".out");
  std::vector<VocabVector> vectors;
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    if (i >= inputs.size()) return {};
    VocabVector v{inputs[i++], {}};
    std::istringstream ids(line);
    int32_t id = 0;
    while (ids >> id) v.ids.push_back(id);
    vectors.push_back(std::move(v));
  }
  if (vectors.size() != inputs.size()) return {};
  return vectors;
}

}  // namespace kvserve::tokenizer::testing
