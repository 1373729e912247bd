// The self-describing block record shared by the file and Redis tiers.
//
// Layout (all integers little-endian):
//   offset  size  field
//   0       4     magic "KVSB"
//   4       4     version (kRecordVersion)
//   8       4     header_bytes: offset of the payload (72 + fingerprint + spec + 8)
//   12      4     group index
//   16      4     num_tokens (the block size: tokens the block holds)
//   20      4     reserved, 0
//   24      16    block hash (low 64 bits, then high)
//   40      8     payload_bytes
//   48      16    XXH3-128 of the payload (low, then high)
//   64      4     fingerprint length F
//   68      4     spec length S
//   72      F     model fingerprint (ModelFingerprint::ToString())
//   72+F    S     group spec (DescribeSpec of the group, with its writer layer count)
//   72+F+S  8     XXH3-64 of bytes [0, 72 + F + S): the header checksum
//   header_bytes  payload_bytes  the block's bytes, as in the group's arena
// Example: fingerprint of 100 bytes, spec of 60: header_bytes = 72 + 100 + 60 + 8 = 240.
//
// A record is accepted only when every field matches what the reader expects (identity and
// key) and both checksums agree, so a block from another model, format, block size or group,
// a torn write or a flipped bit is never served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/config.h"
#include "kv/hash.h"
#include "offload/tier.h"

namespace kvserve::offload {

// 2: the payload is a head-major block (tensor/kv_view.h); 1 was token-major.
inline constexpr uint32_t kRecordVersion = 2;
inline constexpr size_t kRecordFixedHeaderBytes = 72;
// Headers larger than this are rejected (they would mean a corrupt length field).
inline constexpr size_t kMaxRecordHeaderBytes = 64 * 1024;

// What a reader expects of every record in its store.
struct RecordIdentity {
  std::string fingerprint;            // ModelFingerprint::ToString()
  std::vector<std::string> group_specs;  // per group: spec description (with layer count)
  std::vector<int64_t> group_block_bytes;  // per group: payload bytes of one block
  int block_size = 16;
};

// The identity of a model's records: the fingerprint string, per group DescribeSpec plus the
// writer layer count ("full_attention(...) x5 layers") and GroupBlockBytes.
RecordIdentity MakeRecordIdentity(const kv::KvCacheConfig& config,
                                  const kv::ModelFingerprint& fingerprint);

// The parsed header of a record (what follows it is the payload).
struct RecordHeader {
  size_t header_bytes = 0;
  BlockKey key;
  uint64_t payload_bytes = 0;
  uint64_t payload_hash_low = 0;
  uint64_t payload_hash_high = 0;
};

// Header followed by payload. note: key.group < identity.group_specs.size().
Bytes EncodeRecord(const RecordIdentity& identity, const BlockKey& key,
                   std::span<const std::byte> payload);
// Just the header (for writers that send header and payload separately).
Bytes EncodeRecordHeader(const RecordIdentity& identity, const BlockKey& key,
                         std::span<const std::byte> payload);

// Parses and checks the header at the start of `bytes` against `identity` and `key`.
// Corrupt (naming the first mismatch) unless it is whole and matches; `bytes` may end
// before the payload.
Result<RecordHeader> ParseRecordHeader(const RecordIdentity& identity, const BlockKey& key,
                                       std::span<const std::byte> bytes);
// Corrupt unless `payload` has the header's size and checksum.
Status VerifyPayload(const RecordHeader& header, std::span<const std::byte> payload);

// ParseRecordHeader + VerifyPayload on a whole record; returns the payload's bytes (a view
// into `record`).
Result<std::span<const std::byte>> DecodeRecord(const RecordIdentity& identity,
                                                const BlockKey& key,
                                                std::span<const std::byte> record);

// A short hex digest of the fingerprint (XXH3-64, 16 digits) for directory and key names.
std::string FingerprintDigest(const std::string& fingerprint);

}  // namespace kvserve::offload
