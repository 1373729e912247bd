// Helpers shared by the offload tests: scratch directories, identities, deterministic bytes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "offload/record.h"
#include "offload/tier.h"

namespace kvserve::offload::testing {

// A fresh directory under /tmp, removed at destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("kvserve_offload_" + name + "_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++));
    std::filesystem::remove_all(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Two groups: 256-byte blocks and 96-byte blocks, block size 16.
inline RecordIdentity TestIdentity(const std::string& weights = "w0") {
  RecordIdentity id;
  id.fingerprint = "kvserve-kv-v2|arch=test|weights=" + weights + "|kv=f32|block=16";
  id.group_specs = {"full_attention(kv_heads=1,head_dim=8,dtype=f32) x2 layers",
                    "sliding_window(window=32,kv_heads=1,head_dim=3,dtype=f32) x1 layers"};
  id.group_block_bytes = {256, 96};
  id.block_size = 16;
  return id;
}

inline BlockKey Key(uint64_t n, int group = 0) {
  return BlockKey{kv::BlockHash{n * 0x9E3779B97F4A7C15ull + 1, n ^ 0xABCDEFull}, group};
}

inline Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

// The payload a test stores under key(n, group): deterministic in (n, group).
inline Bytes PayloadFor(const RecordIdentity& id, uint64_t n, int group = 0) {
  return RandomBytes(static_cast<size_t>(id.group_block_bytes[group]),
                     static_cast<uint32_t>(n * 31 + group));
}

}  // namespace kvserve::offload::testing
