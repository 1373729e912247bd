#include "offload/file_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;
using testing::PayloadFor;
using testing::ScratchDir;
using testing::TestIdentity;

std::optional<Bytes> MustGet(FileTier& tier, const BlockKey& key) {
  Result<std::optional<Bytes>> got = tier.Get(key);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  return got.ok() ? *got : std::nullopt;
}

TEST(FileTierTest, PutGetAndRebuildAfterRestart) {
  ScratchDir dir("restart");
  const RecordIdentity id = TestIdentity();
  {
    auto tier = FileTier::Open(dir.path(), id);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(tier->Put(Key(i, i % 2), PayloadFor(id, i, i % 2)).ok());
    EXPECT_EQ(tier->num_indexed(), 20u);
    EXPECT_EQ(tier->Stats().stores, 20);
  }
  auto tier = FileTier::Open(dir.path(), id);  // a restart: the index comes from the scan
  EXPECT_EQ(tier->num_indexed(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(tier->Contains(Key(i, i % 2)));
    EXPECT_EQ(MustGet(*tier, Key(i, i % 2)), PayloadFor(id, i, i % 2)) << i;
  }
  EXPECT_FALSE(tier->Contains(Key(99)));
  EXPECT_EQ(MustGet(*tier, Key(99)), std::nullopt);
  EXPECT_EQ(tier->Stats().hits, 20);
  // Directories are private.
  struct stat st;
  ASSERT_EQ(::stat(tier->dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  const std::string sub = tier->PathFor(Key(0)).substr(0, tier->PathFor(Key(0)).rfind('/'));
  ASSERT_EQ(::stat(sub.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(FileTierTest, AnotherModelNeverSeesTheseBlocks) {
  ScratchDir dir("fingerprint");
  auto a = FileTier::Open(dir.path(), TestIdentity("a"));
  ASSERT_TRUE(a->Put(Key(1), PayloadFor(TestIdentity("a"), 1)).ok());
  auto b = FileTier::Open(dir.path(), TestIdentity("b"));
  EXPECT_NE(a->dir(), b->dir());
  EXPECT_FALSE(b->Contains(Key(1)));
  EXPECT_EQ(MustGet(*b, Key(1)), std::nullopt);
}

// Flipped bytes anywhere and truncation: detected, the file deleted, a miss, counted.
TEST(FileTierTest, CorruptFilesAreDeletedNeverServed) {
  ScratchDir dir("corrupt");
  const RecordIdentity id = TestIdentity();
  auto tier = FileTier::Open(dir.path(), id);
  const std::vector<int64_t> offsets = {0, 5, 30, 100, 300, 400};  // header and payload
  int64_t expected_failures = 0;
  for (size_t i = 0; i < offsets.size() + 2; ++i) {
    const BlockKey key = Key(100 + i);
    ASSERT_TRUE(tier->Put(key, PayloadFor(id, 100 + i)).ok());
    const std::string path = tier->PathFor(key);
    if (i < offsets.size()) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(offsets[i]);
      char c = 0;
      f.read(&c, 1);
      c ^= 0x01;
      f.seekp(offsets[i]);
      f.write(&c, 1);
    } else {
      ASSERT_EQ(::truncate(path.c_str(), i == offsets.size() ? 10 : 300), 0);
    }
    EXPECT_EQ(MustGet(*tier, key), std::nullopt) << "case " << i;
    EXPECT_EQ(::access(path.c_str(), F_OK), -1) << "case " << i << ": file not deleted";
    EXPECT_FALSE(tier->Contains(key));
    EXPECT_EQ(tier->Stats().failed_checksums, ++expected_failures);
  }
}

// Pages of `path` in the page cache (mincore on a mapping, which starts no I/O).
size_t ResidentPages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0) << path;
  struct stat st;
  EXPECT_EQ(::fstat(fd, &st), 0);
  const size_t bytes = static_cast<size_t>(st.st_size), page = 4096;
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  EXPECT_NE(map, MAP_FAILED);
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  EXPECT_EQ(::mincore(map, bytes, resident.data()), 0);
  ::munmap(map, bytes);
  ::close(fd);
  size_t n = 0;
  for (unsigned char r : resident) n += r & 1;
  return n;
}

// Writes `path` back and drops its pages from the page cache.
void EvictFromPageCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

// Records the page cache does not hold are read with O_DIRECT (no page cache fill): the same
// bytes, and a flipped header or payload byte is still caught there.
TEST(FileTierTest, UncachedRecordsAreReadDirectlyWithTheSameChecks) {
  ScratchDir dir("uncached");
  const RecordIdentity id = TestIdentity();
  auto tier = FileTier::Open(dir.path(), id);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(Key(i), PayloadFor(id, i)).ok());
  for (int64_t offset : {5, 400}) {  // key 2: a header byte, key 3: a payload byte
    std::fstream f(tier->PathFor(Key(offset == 5 ? 2 : 3)),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(offset);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(offset);
    f.write(&c, 1);
  }
  for (int i = 0; i < 4; ++i) EvictFromPageCache(tier->PathFor(Key(i)));
  for (int i = 0; i < 4; ++i) {
    if (ResidentPages(tier->PathFor(Key(i))) != 0) {
      GTEST_SKIP() << "the page cache keeps " << tier->PathFor(Key(i))
                   << " (tmpfs?): the direct read path cannot be exercised here";
    }
  }
  EXPECT_EQ(MustGet(*tier, Key(0)), PayloadFor(id, 0));
  EXPECT_EQ(MustGet(*tier, Key(1)), PayloadFor(id, 1));
  EXPECT_EQ(ResidentPages(tier->PathFor(Key(0))), 0u) << "read through the page cache";
  EXPECT_EQ(MustGet(*tier, Key(2)), std::nullopt);
  EXPECT_EQ(MustGet(*tier, Key(3)), std::nullopt);
  EXPECT_EQ(::access(tier->PathFor(Key(3)).c_str(), F_OK), -1) << "corrupt file not deleted";
  EXPECT_EQ(tier->Stats().failed_checksums, 2);
  // Cached again (read through the page cache): the buffered path, the same bytes.
  { std::ifstream warm(tier->PathFor(Key(1)), std::ios::binary); warm.ignore(1 << 30); }
  EXPECT_EQ(MustGet(*tier, Key(1)), PayloadFor(id, 1));
}

TEST(FileTierTest, UnwritableRootIsCountedNotFatal) {
  ScratchDir dir("unwritable");
  std::filesystem::create_directories(dir.path());
  const std::string root = dir.path() + "/file_in_the_way";
  { std::ofstream(root) << "x"; }
  const RecordIdentity id = TestIdentity();
  auto tier = FileTier::Open(root, id);
  EXPECT_EQ(tier->Stats().errors, 1);
  Status put = tier->Put(Key(1), PayloadFor(id, 1));
  EXPECT_EQ(put.code(), StatusCode::kIoError);
  EXPECT_EQ(tier->Stats().errors, 2);
  EXPECT_FALSE(tier->Contains(Key(1)));
  Result<std::optional<Bytes>> got = tier->Get(Key(1));
  EXPECT_TRUE(!got.ok() || !got->has_value());
}

// Two tiers (two servers) on one directory, writing overlapping keys from several threads
// and reading each other's blocks: every read is either a miss or the exact bytes.
TEST(FileTierTest, TwoWritersShareOneDirectory) {
  ScratchDir dir("shared");
  const RecordIdentity id = TestIdentity();
  auto a = FileTier::Open(dir.path(), id);
  auto b = FileTier::Open(dir.path(), id);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    FileTier* tier = (t % 2 == 0) ? a.get() : b.get();
    threads.emplace_back([tier, t, &id, &bad] {
      for (int i = 0; i < 60; ++i) {
        const int n = (i * 5 + t * 3) % 40;  // overlapping keys
        if (i % 2 == 0) {
          if (!tier->Put(Key(n), PayloadFor(id, n)).ok()) ++bad;
        } else {
          Result<std::optional<Bytes>> got = tier->Get(Key(n));
          if (!got.ok() || (got->has_value() && **got != PayloadFor(id, n))) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(a->Stats().failed_checksums + b->Stats().failed_checksums, 0);
  // b sees what a wrote even though its index was built before.
  ASSERT_TRUE(a->Put(Key(777), PayloadFor(id, 777)).ok());
  EXPECT_TRUE(b->Contains(Key(777)));
  EXPECT_EQ(MustGet(*b, Key(777)), PayloadFor(id, 777));
  // No temporary files are left behind.
  for (auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(FileTierTest, FileNames) {
  const BlockKey key = Key(5, 3);
  std::optional<BlockKey> parsed = ParseBlockFileName(key.ToString() + ".kvb");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, key);
  EXPECT_FALSE(ParseBlockFileName(key.ToString() + ".kvb.tmp.1.2").has_value());
  EXPECT_FALSE(ParseBlockFileName("zz" + key.ToString().substr(2) + ".kvb").has_value());
  EXPECT_FALSE(ParseBlockFileName("short.kvb").has_value());
}

}  // namespace
}  // namespace kvserve::offload
