#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"
#include "core/stream_copy.h"
#include "core/thread_pool.h"
#include "core/units.h"

namespace kvserve {
namespace {

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = Corrupt("bad magic");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "CORRUPT: bad magic");
  EXPECT_EQ(s.WithContext("reading x.gguf").message(), "reading x.gguf: bad magic");
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KV_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_FALSE(Quarter(6).ok());
  EXPECT_EQ(Quarter(6).status().code(), StatusCode::kInvalidArgument);
}

TEST(UnitsTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(ParseBytes("4GiB").value(), 4 * kGiB);
  EXPECT_EQ(ParseBytes("4gib").value(), 4 * kGiB);
  EXPECT_EQ(ParseBytes("512MiB").value(), 512 * kMiB);
  EXPECT_EQ(ParseBytes("8GB").value(), 8000000000ULL);
  EXPECT_EQ(ParseBytes("1.5G").value(), 3 * kGiB / 2);
  EXPECT_EQ(ParseBytes("1048576").value(), 1048576ULL);
  EXPECT_EQ(ParseBytes(" 2 KiB ").value(), 2048ULL);
}

TEST(UnitsTest, RejectsGarbage) {
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("GiB").ok());
  EXPECT_FALSE(ParseBytes("4 parsecs").ok());
  EXPECT_FALSE(ParseBytes("1.2.3G").ok());
  EXPECT_FALSE(ParseBytes("-4G").ok());
  EXPECT_FALSE(ParseBytes("99999999999TiB").ok());
}

TEST(UnitsTest, Formats) {
  EXPECT_EQ(FormatBytes(123), "123 B");
  EXPECT_EQ(FormatBytes(3 * kGiB + kGiB / 2), "3.50 GiB");
}

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {0, 1, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) hits[i]++;
        }, 4);
      }
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 3) << "n=" << n << " i=" << i;
    }
  }
}

// Every size around the streaming threshold and the 256-byte runs, every alignment of source
// and destination: the bytes written are memcpy's, nothing outside the destination changes.
TEST(StreamCopyTest, SameBytesAsMemcpyAtEveryAlignment) {
  const size_t sizes[] = {0, 1, 63, 255, kStreamCopyMinBytes - 1, kStreamCopyMinBytes,
                          kStreamCopyMinBytes + 1, kStreamCopyMinBytes + 255, 589824, 589824 + 77};
  for (size_t size : sizes) {
    for (size_t dst_off : {0, 1, 17, 63}) {
      for (size_t src_off : {0, 5, 64}) {
        std::vector<unsigned char> src(size + 128), dst(size + 128, 0xAA);
        for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + size);
        StreamCopy(dst.data() + dst_off, src.data() + src_off, size);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= dst_off && i < dst_off + size;
          const unsigned char want = inside ? src[i - dst_off + src_off] : 0xAA;
          ASSERT_EQ(dst[i], want) << "size " << size << " dst+" << dst_off << " src+" << src_off
                                  << " byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve
