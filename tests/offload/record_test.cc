#include "offload/record.h"

#include <gtest/gtest.h>

#include "offload/test_util.h"

namespace kvserve::offload {
namespace {

using testing::Key;
using testing::PayloadFor;
using testing::TestIdentity;

TEST(RecordTest, RoundTripAndLayout) {
  const RecordIdentity id = TestIdentity();
  const Bytes payload = PayloadFor(id, 7);
  const Bytes record = EncodeRecord(id, Key(7), payload);
  const size_t header = 72 + id.fingerprint.size() + id.group_specs[0].size() + 8;
  ASSERT_EQ(record.size(), header + payload.size());
  EXPECT_EQ(static_cast<char>(record[0]), 'K');
  EXPECT_EQ(static_cast<char>(record[3]), 'B');
  Result<std::span<const std::byte>> decoded = DecodeRecord(id, Key(7), record);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(std::equal(decoded->begin(), decoded->end(), payload.begin(), payload.end()));
}

TEST(RecordTest, EveryFlippedByteIsDetected) {
  const RecordIdentity id = TestIdentity();
  const Bytes record = EncodeRecord(id, Key(3, 1), PayloadFor(id, 3, 1));
  for (size_t i = 0; i < record.size(); ++i) {
    Bytes bad = record;
    bad[i] ^= std::byte{0x10};
    EXPECT_FALSE(DecodeRecord(id, Key(3, 1), bad).ok()) << "flipped byte " << i;
  }
  for (size_t n = 0; n < record.size(); n += 7) {
    EXPECT_EQ(DecodeRecord(id, Key(3, 1), std::span(record).first(n)).status().code(),
              StatusCode::kCorrupt) << "truncated to " << n;
  }
}

TEST(RecordTest, ForeignRecordsAreRejected) {
  const RecordIdentity id = TestIdentity();
  const Bytes record = EncodeRecord(id, Key(3), PayloadFor(id, 3));
  EXPECT_FALSE(DecodeRecord(TestIdentity("other-weights"), Key(3), record).ok());
  EXPECT_FALSE(DecodeRecord(id, Key(4), record).ok());      // another block
  EXPECT_FALSE(DecodeRecord(id, Key(3, 1), record).ok());   // another group
  RecordIdentity other_block = id;
  other_block.block_size = 32;
  EXPECT_FALSE(DecodeRecord(other_block, Key(3), record).ok());
}

}  // namespace
}  // namespace kvserve::offload
