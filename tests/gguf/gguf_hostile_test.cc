// Malformed and hostile GGUF input: hand-built bad files, then randomized truncation and
// corruption of valid ones. Every case must return a Status; none may crash, read out of
// bounds (run under ASan) or allocate in proportion to a forged count.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gguf/gguf.h"
#include "support/temp_path.h"

namespace kvserve::gguf {
namespace {

// Little-endian GGUF bytes, built by hand.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& Str(std::string_view s) {
    U64(s.size());
    return Raw(s.data(), s.size());
  }
  Bytes& Chars(std::string_view s) { return Raw(s.data(), s.size()); }
  Bytes& Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return Chars("GGUF").U32(version).U64(tensors).U64(kvs);
  }
  // A tensor info with one or more dims.
  Bytes& Tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t off) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(off);
  }
  Bytes& PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  Bytes& Raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

constexpr uint32_t kU8 = 0, kU32 = 4, kBool = 7, kString = 8, kArray = 9;

// Parses `bytes`, expects failure with `code`, returns the message.
std::string ExpectError(std::vector<uint8_t> bytes, StatusCode code = StatusCode::kCorrupt) {
  auto f = GgufFile::FromBuffer(std::move(bytes));
  EXPECT_FALSE(f.ok());
  if (f.ok()) return "";
  EXPECT_EQ(f.status().code(), code) << f.status().ToString();
  return f.status().message();
}

TEST(GgufHostile, HeaderProblems) {
  EXPECT_NE(ExpectError({}).find("magic"), std::string::npos);
  EXPECT_NE(ExpectError(Bytes().Chars("GGUX").U32(3).U64(0).U64(0).Take()).find("magic"),
            std::string::npos);
  ExpectError(Bytes().Header(0, 0, 1).Take(), StatusCode::kUnimplemented);
  EXPECT_NE(ExpectError(Bytes().Header(0, 0, 0x03000000).Take(), StatusCode::kUnimplemented)
                .find("big-endian"),
            std::string::npos);
  // v2 with nothing in it is fine.
  EXPECT_TRUE(GgufFile::FromBuffer(Bytes().Header(0, 0, 2).Take()).ok());
}

TEST(GgufHostile, ForgedCountsFailFastWithoutAllocating) {
  const uint64_t kHuge = uint64_t{1} << 60;
  const auto start = std::chrono::steady_clock::now();
  ExpectError(Bytes().Header(0, kHuge).Zeros(76).Take());
  ExpectError(Bytes().Header(kHuge, 0).Zeros(76).Take());
  // An array of 2^60 u8 in a 100-byte file.
  std::string m =
      ExpectError(Bytes().Header(0, 1).Str("a").U32(kArray).U32(kU8).U64(kHuge).Zeros(40).Take());
  EXPECT_NE(m.find("'a'"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot fit"), std::string::npos) << m;
  // Arrays of arrays of strings: count checked against 12 / 8 bytes each.
  ExpectError(Bytes().Header(0, 1).Str("a").U32(kArray).U32(kArray).U64(8).Zeros(90).Take());
  ExpectError(Bytes().Header(0, 1).Str("a").U32(kArray).U32(kString).U64(12).Zeros(90).Take());
  // A string longer than the file.
  ExpectError(Bytes().Header(0, 1).Str("a").U32(kString).U64(kHuge).Zeros(10).Take());
  ExpectError(Bytes().Header(0, 1).U64(~uint64_t{0}).Take());
  // Real bytes behind the count, but more values than the per-file limit of 2^24.
  m = ExpectError(Bytes()
                      .Header(0, 1)
                      .Str("a")
                      .U32(kArray)
                      .U32(kU8)
                      .U64((1u << 24) + 1)
                      .Zeros((1u << 24) + 1)
                      .Take());
  EXPECT_NE(m.find("exceeds the limit"), std::string::npos) << m;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 1.0);
}

TEST(GgufHostile, ValueProblems) {
  ExpectError(Bytes().Header(0, 1).Str("a").U32(13).U32(0).Take());  // unknown value type
  ExpectError(Bytes().Header(0, 1).Str("a").U32(kArray).U32(99).U64(0).Take());
  ExpectError(Bytes().Header(0, 1).Str("b").U32(kBool).U8(2).Take());
  std::string m =
      ExpectError(Bytes().Header(0, 2).Str("k").U32(kU8).U8(1).Str("k").U32(kU8).U8(2).Take());
  EXPECT_NE(m.find("duplicate metadata key 'k'"), std::string::npos) << m;
}

// `levels` arrays nested inside each other, the innermost empty.
std::vector<uint8_t> NestedArrays(int levels) {
  Bytes b;
  b.Header(0, 1).Str("n").U32(kArray);
  for (int i = 1; i < levels; ++i) b.U32(kArray).U64(1);
  b.U32(kU8).U64(0);
  return b.Take();
}

TEST(GgufHostile, ArrayNestingIsLimited) {
  EXPECT_TRUE(GgufFile::FromBuffer(NestedArrays(8)).ok());
  EXPECT_NE(ExpectError(NestedArrays(9)).find("nested"), std::string::npos);
  ExpectError(NestedArrays(100000));
}

TEST(GgufHostile, AlignmentMustBeAPowerOfTwo) {
  auto with_alignment = [](uint32_t type, uint64_t v) {
    Bytes b;
    b.Header(0, 1).Str("general.alignment").U32(type);
    if (type == kU32) b.U32(static_cast<uint32_t>(v));
    if (type == kString) b.Str("32");
    return b.Take();
  };
  ExpectError(with_alignment(kU32, 0));
  ExpectError(with_alignment(kU32, 48));
  ExpectError(with_alignment(kString, 0));
  auto ok = GgufFile::FromBuffer(with_alignment(kU32, 64));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->alignment(), 64u);
}

// A one-tensor file: header, info for `dims`/`type`/`offset`, padding, `data_bytes` zeros.
std::vector<uint8_t> OneTensor(std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                               size_t data_bytes, std::string name = "blk.0.attn_q.weight") {
  return Bytes()
      .Header(1, 0)
      .Tensor(name, std::move(dims), type, offset)
      .PadTo(32)
      .Zeros(data_bytes)
      .Take();
}

TEST(GgufHostile, TensorProblems) {
  EXPECT_TRUE(GgufFile::FromBuffer(OneTensor({4, 2}, 0, 0, 32)).ok());
  ExpectError(OneTensor({}, 0, 0, 32));                        // no dims
  ExpectError(OneTensor({1, 1, 1, 1, 1}, 0, 0, 32));           // 5 dims
  ExpectError(OneTensor({4, 0}, 0, 0, 32));                    // zero dim
  ExpectError(OneTensor({4}, 1000, 0, 32));                    // unknown type
  ExpectError(OneTensor({4}, 0, 16, 32));                      // misaligned offset
  ExpectError(OneTensor({33}, 8, 0, 64));                      // Q8_0 row not whole blocks
  ExpectError(OneTensor({1ull << 40, 1ull << 40}, 0, 0, 32));  // element count overflow
  ExpectError(OneTensor({1ull << 62}, 0, 0, 32));              // byte size overflow
  ExpectError(OneTensor({4}, 0, 0, 32, ""));                   // empty name
  ExpectError(OneTensor({4}, 0, ~uint64_t{0} - 31, 32));       // offset + size wraps
  const std::string m = ExpectError(OneTensor({1024}, 0, 32, 4000));
  EXPECT_NE(m.find("tensor 'blk.0.attn_q.weight' data [offset 128, 4096 bytes] ends past end of "
                   "file (4096 bytes)"),
            std::string::npos)
      << m;
  ExpectError(Bytes()
                  .Header(2, 0)
                  .Tensor("t", {4}, 0, 0)
                  .Tensor("t", {4}, 0, 0)
                  .PadTo(32)
                  .Zeros(32)
                  .Take());
}

TEST(GgufHostile, UnsupportedGgmlTypesStillOpen) {
  auto f = GgufFile::FromBuffer(OneTensor({256, 2}, 17, 0, 148));  // IQ2_XS: 74 B / 256 values
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const TensorInfo& t = (*f)->tensors()[0];
  EXPECT_EQ(t.ggml_type, 17u);
  EXPECT_EQ(t.dtype, std::nullopt);
  EXPECT_EQ(t.size_bytes, 148u);
  ExpectError(OneTensor({256, 2}, 17, 0, 147));
}

// ---- randomized truncation and corruption ----

// A writer-made file with several metadata types, arrays and three small tensors. The last
// tensor's data is a multiple of the alignment, so the file has no trailing padding and every
// truncation cuts something the parser needs.
std::vector<uint8_t> SmallValidFile() {
  GgufWriter w;
  w.Set("general.architecture", Value::Str("llama"));
  w.Set("general.alignment", Value::U32(32));
  w.Set("llama.block_count", Value::U32(2));
  w.Set("f", Value::F32(0.5f));
  w.Set("d", Value::F64(-1.5));
  w.Set("b", Value::Bool(true));
  w.Set("i64", Value::I64(-5));
  w.Set("toks", Value::StrArray({"<s>", "</s>", "hello", "world"}));
  w.Set("scores", Value::F32Array({0.0f, -1.0f, -2.5f, 3.0f}));
  w.Set("ids", Value::I32Array({1, 2, 3}));
  Array inner{ValueType::kUint8, {Value::U8(1), Value::U8(2)}};
  w.Set("nested",
        Value{ValueType::kArray, Array{ValueType::kArray, {Value{ValueType::kArray, inner}}}});
  CHECK(w.AddTensor("a", {4, 2}, tensor::DType::kF16, std::vector<uint8_t>(16, 1)).ok());
  CHECK(w.AddTensor("b", {32}, tensor::DType::kQ8_0, std::vector<uint8_t>(34, 2)).ok());
  CHECK(w.AddTensor("c", {8}, tensor::DType::kF32, std::vector<uint8_t>(32, 3)).ok());
  return w.Serialize();
}

// Reads everything a successful parse exposes, so ASan sees any out-of-bounds pointer.
int TouchEverything(const GgufFile& f) {
  int sum = 0;
  for (const TensorInfo& t : f.tensors()) {
    if (t.size_bytes > 0) {
      sum += std::to_integer<int>(t.data[0]) + std::to_integer<int>(t.data[t.size_bytes - 1]);
    }
  }
  for (const auto& [key, value] : f.metadata()) {
    sum += static_cast<int>(key.size()) + (f.GetString(key).ok() ? 1 : 0) +
           (f.GetStringArray(key).ok() ? 1 : 0) + (f.GetFloatArray(key).ok() ? 1 : 0);
  }
  return sum;
}

// Applies 1-4 random corruptions: bit flips, random bytes, and random u64s (forged counts).
void Corrupt(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const size_t pos = rng() % b.size();
    switch (rng() % 4) {
      case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: b[pos] = static_cast<uint8_t>(rng()); break;
      case 2: b[pos] = (rng() % 2) ? 0xFF : 0x00; break;
      case 3: {
        const uint64_t v = (rng() % 2) ? rng() : (rng() % 64);
        std::memcpy(b.data() + pos, &v, std::min<size_t>(8, b.size() - pos));
        break;
      }
    }
  }
}

void FuzzBase(const std::vector<uint8_t>& base, int truncations, int corruptions, uint64_t seed,
              bool truncations_must_fail) {
  std::mt19937_64 rng(seed);
  int opened = 0;
  for (int i = 0; i < truncations; ++i) {
    const size_t len =
        truncations >= static_cast<int>(base.size()) ? i % base.size() : rng() % base.size();
    auto f = GgufFile::FromBuffer(std::vector<uint8_t>(base.begin(), base.begin() + len));
    if (truncations_must_fail) {
      ASSERT_FALSE(f.ok()) << "truncated to " << len << " bytes";
    }
  }
  for (int i = 0; i < corruptions; ++i) {
    std::vector<uint8_t> b = base;
    Corrupt(b, rng);
    auto f = GgufFile::FromBuffer(std::move(b));
    if (f.ok()) {
      ++opened;
      TouchEverything(**f);
    } else {
      EXPECT_FALSE(f.status().message().empty());
    }
  }
  std::printf("%d of %d corrupted copies still parsed\n", opened, corruptions);
}

TEST(GgufFuzz, WriterFile) {
  const std::vector<uint8_t> base = SmallValidFile();
  auto f = GgufFile::FromBuffer(base);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 3u);
  FuzzBase(base, static_cast<int>(base.size()), 10000, 1, /*truncations_must_fail=*/true);
}

TEST(GgufFuzz, Stories260KHeaderRegion) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/models/stories260K.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto f = GgufFile::FromBuffer(all);
  ASSERT_TRUE(f.ok());
  // The header region: metadata (with the 512-token vocab) and 48 tensor infos end at byte
  // ~14.2k; keep 16 KiB so the first tensors' data is included too.
  ASSERT_GT(all.size(), 16384u);
  std::vector<uint8_t> head(all.begin(), all.begin() + 16384);
  FuzzBase(head, 2000, 2000, 2, /*truncations_must_fail=*/true);
}

}  // namespace
}  // namespace kvserve::gguf

namespace kvserve::gguf {
namespace {

// general.alignment = 1 is legal and can place an F32 tensor at an odd address; the reader
// hands out an aligned copy instead (loading floats from it would be undefined behaviour).
TEST(GgufHostile, AlignmentOnePlacesNoTensorMisaligned) {
  GgufWriter w;
  w.Set("general.alignment", Value::U32(1));
  ASSERT_TRUE(w.AddTensor("a", {3}, tensor::DType::kF16, std::vector<uint8_t>(6, 1)).ok());
  std::vector<uint8_t> floats(4 * 5);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(w.AddTensor("b", {5}, tensor::DType::kF32, floats).ok());
  // Open from a file (mmap: page-aligned base), so only the layout decides.
  const std::string path = kvserve::testing::TempPath("align1.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->alignment(), 1u);
  const TensorInfo* b = (*file)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b->offset % 4, 0u) << "the test wants a misaligned layout";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % kTensorDataAlignment, 0u);
  EXPECT_EQ(std::memcmp(b->data, floats.data(), floats.size()), 0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvserve::gguf
