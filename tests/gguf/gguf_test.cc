#include "gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "tensor/quant.h"

namespace kvserve::gguf {
namespace {

std::string SharedPath(const std::string& rel) {
  return std::string(KVSERVE_SHARED_DIR) + "/" + rel;
}

TEST(GgufWriteRead, EveryValueTypeRoundTrips) {
  GgufWriter w;
  w.Set("u8", Value::U8(200));
  w.Set("i8", Value{ValueType::kInt8, int64_t{-100}});
  w.Set("u16", Value{ValueType::kUint16, uint64_t{65535}});
  w.Set("i16", Value{ValueType::kInt16, int64_t{-32768}});
  w.Set("u32", Value::U32(4000000000u));
  w.Set("i32", Value::I32(-2000000000));
  w.Set("f32", Value::F32(1.25f));
  w.Set("bool", Value::Bool(true));
  w.Set("str", Value::Str("h\xc3\xa9llo"));
  w.Set("u64", Value::U64(18446744073709551615ull));
  w.Set("i64", Value::I64(-9000000000000000000ll));
  w.Set("f64", Value::F64(3.141592653589793));
  w.Set("empty", Value::Str(""));
  w.Set("strs", Value::StrArray({"a", "", "ccc"}));
  w.Set("floats", Value::F32Array({0.5f, -2.0f}));
  w.Set("ints", Value::I32Array({1, -2, 3}));
  w.Set("empty_arr", Value::I32Array({}));
  Array inner1{ValueType::kUint16, {Value{ValueType::kUint16, uint64_t{7}}}};
  Array inner2{ValueType::kUint16, {}};
  Array nested{ValueType::kArray,
               {Value{ValueType::kArray, inner1}, Value{ValueType::kArray, inner2}}};
  w.Set("nested", Value{ValueType::kArray, nested});
  w.Set("u8", Value::U8(201));  // replaces in place, keeps position

  auto file = GgufFile::FromBuffer(w.Serialize());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), 18u);
  EXPECT_EQ(f.metadata()[0].first, "u8");
  EXPECT_EQ(*f.GetInt("u8"), 201);
  EXPECT_EQ(f.Find("u8")->type, ValueType::kUint8);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(f.Find("i8")->type, ValueType::kInt8);
  EXPECT_EQ(*f.GetInt("u16"), 65535);
  EXPECT_EQ(*f.GetInt("i16"), -32768);
  EXPECT_EQ(*f.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*f.GetInt("i32"), -2000000000);
  EXPECT_EQ(*f.GetFloat("f32"), 1.25);
  EXPECT_EQ(f.Find("f32")->type, ValueType::kFloat32);
  EXPECT_EQ(*f.GetBool("bool"), true);
  EXPECT_EQ(*f.GetString("str"), "h\xc3\xa9llo");
  EXPECT_EQ(std::get<uint64_t>(f.Find("u64")->data), 18446744073709551615ull);
  EXPECT_EQ(f.GetInt("u64").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(*f.GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f.GetFloat("f64"), 3.141592653589793);
  EXPECT_EQ(*f.GetString("empty"), "");
  EXPECT_EQ(*f.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*f.GetFloatArray("floats"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(*f.GetIntArray("ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_TRUE(f.GetIntArray("empty_arr")->empty());
  const auto& outer = std::get<Array>(f.Find("nested")->data);
  EXPECT_EQ(outer.element_type, ValueType::kArray);
  ASSERT_EQ(outer.elements.size(), 2u);
  const auto& in1 = std::get<Array>(outer.elements[0].data);
  EXPECT_EQ(in1.element_type, ValueType::kUint16);
  ASSERT_EQ(in1.elements.size(), 1u);
  EXPECT_EQ(std::get<uint64_t>(in1.elements[0].data), 7u);
  EXPECT_TRUE(std::get<Array>(outer.elements[1].data).elements.empty());
  // Re-serializing what was read gives identical bytes.
  GgufWriter w2;
  for (const auto& [k, v] : f.metadata()) w2.Set(k, v);
  EXPECT_EQ(w2.Serialize(), w.Serialize());
}

TEST(GgufWriteRead, GettersReportMissingAndWrongTypes) {
  GgufWriter w;
  w.Set("s", Value::Str("x"));
  w.Set("i", Value::I32(5));
  auto f = GgufFile::FromBuffer(w.Serialize());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->GetString("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*f)->GetInt("s").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE((*f)->GetInt("s").status().message().find("'s'"), std::string::npos);
  EXPECT_EQ(*(*f)->GetFloat("i"), 5.0);
  EXPECT_EQ(*(*f)->GetIntOr("nope", 9), 9);
  EXPECT_EQ(*(*f)->GetIntOr("i", 9), 5);
  EXPECT_FALSE((*f)->GetIntOr("s", 9).ok());
  EXPECT_EQ(*(*f)->GetStringOr("nope", "d"), "d");
  EXPECT_EQ(*(*f)->GetBoolOr("nope", true), true);
  EXPECT_EQ(*(*f)->GetFloatOr("nope", 2.5), 2.5);
  EXPECT_FALSE((*f)->GetStringArray("i").ok());
}

// A float parameter that is NaN or infinite is an error naming the key (it would otherwise
// reach a model's norms, rope or attention scale and poison every output, or trip a check).
TEST(GgufWriteRead, NonFiniteFloatsAreInvalid) {
  GgufWriter w;
  w.Set("nan", Value::F32(std::numeric_limits<float>::quiet_NaN()));
  w.Set("inf", Value::F32(std::numeric_limits<float>::infinity()));
  w.Set("ninf", Value::F64(-std::numeric_limits<double>::infinity()));
  w.Set("big", Value::F32(std::numeric_limits<float>::max()));
  auto f = GgufFile::FromBuffer(w.Serialize());
  ASSERT_TRUE(f.ok());
  for (const char* key : {"nan", "inf", "ninf"}) {
    const Result<double> v = (*f)->GetFloatOr(key, 1.0);
    ASSERT_FALSE(v.ok()) << key;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(std::string("'") + key + "'"), std::string::npos);
    EXPECT_NE(v.status().message().find("finite"), std::string::npos);
  }
  EXPECT_EQ(*(*f)->GetFloat("big"), std::numeric_limits<float>::max());
}

TEST(GgufWriteRead, TensorsOfEveryGgufTypeRoundTrip) {
  GgufWriter w;
  const tensor::DType types[] = {tensor::DType::kF32, tensor::DType::kF16, tensor::DType::kBF16,
                                 tensor::DType::kQ8_0, tensor::DType::kQ4_0};
  std::vector<std::vector<uint8_t>> datas;
  for (tensor::DType t : types) {
    std::vector<float> src(64 * 3);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
    std::vector<uint8_t> bytes(tensor::RowBytes(t, 64) * 3);
    for (int r = 0; r < 3; ++r) {
      tensor::QuantizeRow(t, src.data() + 64 * r, bytes.data() + tensor::RowBytes(t, 64) * r, 64);
    }
    datas.push_back(bytes);
    ASSERT_TRUE(
        w.AddTensor(std::string("t.") + std::string(tensor::DTypeName(t)), {64, 3}, t, bytes).ok());
  }
  auto f = GgufFile::FromBuffer(w.Serialize());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const TensorInfo& t = (*f)->tensors()[i];
    EXPECT_EQ(t.dtype, types[i]);
    EXPECT_EQ(t.ggml_type, *tensor::GgmlTypeId(types[i]));
    EXPECT_EQ(t.dims, (std::vector<int64_t>{64, 3}));
    EXPECT_EQ(t.NumElements(), 192);
    EXPECT_EQ(t.size_bytes, datas[i].size());
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.data - (*f)->tensors()[0].data,
              static_cast<ptrdiff_t>(t.offset - (*f)->tensors()[0].offset));
    EXPECT_EQ(std::memcmp(t.data, datas[i].data(), datas[i].size()), 0);
    EXPECT_EQ((*f)->FindTensor(t.name), &t);
  }
  EXPECT_EQ((*f)->FindTensor("missing"), nullptr);
}

TEST(GgufWriteRead, AddTensorRejectsBadShapes) {
  GgufWriter w;
  EXPECT_FALSE(w.AddTensor("a", {33}, tensor::DType::kQ8_0, std::vector<uint8_t>(34)).ok());
  EXPECT_FALSE(w.AddTensor("a", {32}, tensor::DType::kQ8_0, std::vector<uint8_t>(33)).ok());
  EXPECT_FALSE(w.AddTensor("a", {}, tensor::DType::kF32, {}).ok());
  EXPECT_FALSE(
      w.AddTensor("a", {1, 1, 1, 1, 1}, tensor::DType::kF32, std::vector<uint8_t>(4)).ok());
  EXPECT_FALSE(w.AddTensor("a", {0}, tensor::DType::kF32, {}).ok());
  EXPECT_FALSE(
      w.AddTensor("a", {32}, tensor::DType::kFP8_E4M3_E8M0_32, std::vector<uint8_t>(33)).ok());
  EXPECT_TRUE(w.AddTensor("a", {2}, tensor::DType::kF32, std::vector<uint8_t>(8)).ok());
  EXPECT_FALSE(w.AddTensor("a", {2}, tensor::DType::kF32, std::vector<uint8_t>(8)).ok());
}

TEST(GgufWriteRead, HonoursCustomAlignmentAndWritesFile) {
  GgufWriter w;
  w.Set("general.alignment", Value::U32(64));
  ASSERT_TRUE(w.AddTensor("a", {3}, tensor::DType::kF32, std::vector<uint8_t>(12, 1)).ok());
  ASSERT_TRUE(w.AddTensor("b", {5}, tensor::DType::kF16, std::vector<uint8_t>(10, 2)).ok());
  const std::string path =
      ::testing::TempDir() + "/gguf_test_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->tensors()[1].offset, 64u);
  // The mapping is page-aligned, so aligned offsets give aligned pointers.
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->tensors()[1].data) % 64, 0u);
  EXPECT_EQ((*f)->file_size() % 64, 0u);
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ(std::to_integer<int>((*f)->tensors()[1].data[0]), 2);
  std::filesystem::remove(path);

  GgufWriter bad;
  bad.Set("general.alignment", Value::U32(48));
  EXPECT_FALSE(bad.Write(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
}

// The tensor data of a mapped file moves into one anonymous region with the same bytes and
// offsets between tensors; metadata stays readable; small files and buffers stay as they are.
TEST(GgufOpen, MoveTensorDataToHugePagesKeepsEveryByte) {
  GgufWriter w;
  w.Set("general.name", Value::Str("huge"));
  std::vector<uint8_t> a(3 << 20), b(1000), c(777 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 13 + 1);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 5 + 9);
  ASSERT_TRUE(w.AddTensor("a", {static_cast<int64_t>(a.size() / 4)}, tensor::DType::kF32, a).ok());
  ASSERT_TRUE(w.AddTensor("b", {500}, tensor::DType::kF16, b).ok());
  ASSERT_TRUE(w.AddTensor("c", {777}, tensor::DType::kF32, c).ok());
  const std::string path =
      ::testing::TempDir() + "/gguf_huge_test_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<const std::byte*> before;
  for (const TensorInfo& t : (*f)->tensors()) before.push_back(t.data);
  const bool moved = (*f)->MoveTensorDataToHugePages();
  const std::vector<TensorInfo>& t = (*f)->tensors();
  if (moved) {
    EXPECT_NE(t[0].data, before[0]);
    EXPECT_EQ(t[1].data - t[0].data, before[1] - before[0]);
    EXPECT_EQ(t[2].data - t[0].data, before[2] - before[0]);
  } else {
    std::printf("no transparent huge pages here: the tensors stay mapped\n");
  }
  EXPECT_EQ(std::memcmp(t[0].data, a.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(t[1].data, b.data(), b.size()), 0);
  EXPECT_EQ(std::memcmp(t[2].data, c.data(), c.size()), 0);
  for (const TensorInfo& info : t) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(info.data) % kTensorDataAlignment, 0u);
  }
  EXPECT_EQ(*(*f)->GetString("general.name"), "huge");
  EXPECT_FALSE((*f)->MoveTensorDataToHugePages());  // once
  std::filesystem::remove(path);

  GgufWriter small;
  ASSERT_TRUE(small.AddTensor("s", {4}, tensor::DType::kF32, std::vector<uint8_t>(16, 1)).ok());
  ASSERT_TRUE(small.Write(path).ok());
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok());
  const std::byte* small_data = (*g)->tensors()[0].data;
  EXPECT_FALSE((*g)->MoveTensorDataToHugePages());
  EXPECT_EQ((*g)->tensors()[0].data, small_data);
  std::filesystem::remove(path);
}

TEST(GgufOpen, MissingFileIsNotFound) {
  auto f = GgufFile::Open("/nonexistent/x.gguf");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(GgufOpen, Stories260K) {
  const std::string path = SharedPath("models/stories260K.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*(*f)->GetInt("llama.block_count"), 5);
  const TensorInfo* emb = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->dtype, tensor::DType::kF32);
  EXPECT_EQ(emb->size_bytes, 64u * 512 * 4);
  EXPECT_EQ((*f)->tensors().size(), 48u);
}

TEST(GgufOpen, LlamaSpmVocab) {
  const std::string path = SharedPath("tokenizers/ggml-vocab-llama-spm.gguf");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto tokens = (*f)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  ASSERT_EQ(tokens->size(), 32000u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  auto scores = (*f)->GetFloatArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok());
  EXPECT_EQ(scores->size(), 32000u);
}

}  // namespace
}  // namespace kvserve::gguf
