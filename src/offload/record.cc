#include "offload/record.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>

namespace kvserve::offload {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'S', 'B'};

void PutU32(Bytes* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void PutU64(Bytes* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void PutString(Bytes* out, const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out->insert(out->end(), p, p + s.size());
}
uint64_t GetLe(std::span<const std::byte> bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= static_cast<uint64_t>(bytes[offset + i]) << (8 * i);
  }
  return v;
}
bool SameString(std::span<const std::byte> bytes, size_t offset, const std::string& s) {
  return std::memcmp(bytes.data() + offset, s.data(), s.size()) == 0;
}

}  // namespace

Bytes EncodeRecordHeader(const RecordIdentity& identity, const BlockKey& key,
                         std::span<const std::byte> payload) {
  CHECK(key.group >= 0 && static_cast<size_t>(key.group) < identity.group_specs.size());
  const std::string& spec = identity.group_specs[key.group];
  const XXH128_hash_t sum = XXH3_128bits(payload.data(), payload.size());
  Bytes out;
  out.reserve(kRecordFixedHeaderBytes + identity.fingerprint.size() + spec.size() + 8);
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  PutU32(&out, kRecordVersion);
  PutU32(&out, static_cast<uint32_t>(kRecordFixedHeaderBytes + identity.fingerprint.size() +
                                     spec.size() + 8));
  PutU32(&out, static_cast<uint32_t>(key.group));
  PutU32(&out, static_cast<uint32_t>(identity.block_size));
  PutU32(&out, 0);
  PutU64(&out, key.hash.low);
  PutU64(&out, key.hash.high);
  PutU64(&out, payload.size());
  PutU64(&out, sum.low64);
  PutU64(&out, sum.high64);
  PutU32(&out, static_cast<uint32_t>(identity.fingerprint.size()));
  PutU32(&out, static_cast<uint32_t>(spec.size()));
  PutString(&out, identity.fingerprint);
  PutString(&out, spec);
  PutU64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

Bytes EncodeRecord(const RecordIdentity& identity, const BlockKey& key,
                   std::span<const std::byte> payload) {
  Bytes out = EncodeRecordHeader(identity, key, payload);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Result<RecordHeader> ParseRecordHeader(const RecordIdentity& identity, const BlockKey& key,
                                       std::span<const std::byte> bytes) {
  if (bytes.size() < kRecordFixedHeaderBytes) return Corrupt("record shorter than its header");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return Corrupt("bad magic");
  if (GetLe(bytes, 4, 4) != kRecordVersion) {
    return Corrupt(fmt::format("unsupported record version {}", GetLe(bytes, 4, 4)));
  }
  if (key.group < 0 || static_cast<size_t>(key.group) >= identity.group_specs.size()) {
    return Corrupt(fmt::format("group {} is not a group of this model", key.group));
  }
  const std::string& spec = identity.group_specs[key.group];
  const size_t fp_len = GetLe(bytes, 64, 4);
  const size_t spec_len = GetLe(bytes, 68, 4);
  const size_t header_bytes = GetLe(bytes, 8, 4);
  if (fp_len != identity.fingerprint.size() || spec_len != spec.size() ||
      header_bytes != kRecordFixedHeaderBytes + fp_len + spec_len + 8) {
    return Corrupt("header lengths do not match this model");
  }
  if (bytes.size() < header_bytes) return Corrupt("record truncated inside its header");
  const uint64_t header_sum = XXH3_64bits(bytes.data(), header_bytes - 8);
  if (header_sum != GetLe(bytes, header_bytes - 8, 8)) return Corrupt("header checksum mismatch");
  if (!SameString(bytes, kRecordFixedHeaderBytes, identity.fingerprint)) {
    return Corrupt("record of another model fingerprint");
  }
  if (!SameString(bytes, kRecordFixedHeaderBytes + fp_len, spec)) {
    return Corrupt("record of another KV spec");
  }
  RecordHeader h;
  h.header_bytes = header_bytes;
  h.key.group = static_cast<int>(GetLe(bytes, 12, 4));
  h.key.hash.low = GetLe(bytes, 24, 8);
  h.key.hash.high = GetLe(bytes, 32, 8);
  h.payload_bytes = GetLe(bytes, 40, 8);
  h.payload_hash_low = GetLe(bytes, 48, 8);
  h.payload_hash_high = GetLe(bytes, 56, 8);
  if (!(h.key == key)) return Corrupt("record holds another block");
  if (GetLe(bytes, 16, 4) != static_cast<uint64_t>(identity.block_size)) {
    return Corrupt("record of another block size");
  }
  if (h.payload_bytes != static_cast<uint64_t>(identity.group_block_bytes[key.group])) {
    return Corrupt(fmt::format("payload of {} bytes, expected {}", h.payload_bytes,
                               identity.group_block_bytes[key.group]));
  }
  return h;
}

Status VerifyPayload(const RecordHeader& header, std::span<const std::byte> payload) {
  if (payload.size() != header.payload_bytes) {
    return Corrupt(fmt::format("payload of {} bytes, header says {}", payload.size(),
                               header.payload_bytes));
  }
  const XXH128_hash_t sum = XXH3_128bits(payload.data(), payload.size());
  if (sum.low64 != header.payload_hash_low || sum.high64 != header.payload_hash_high) {
    return Corrupt("payload checksum mismatch");
  }
  return Status::Ok();
}

Result<std::span<const std::byte>> DecodeRecord(const RecordIdentity& identity,
                                                const BlockKey& key,
                                                std::span<const std::byte> record) {
  KV_ASSIGN_OR_RETURN(RecordHeader header, ParseRecordHeader(identity, key, record));
  std::span<const std::byte> payload = record.subspan(header.header_bytes);
  KV_RETURN_IF_ERROR(VerifyPayload(header, payload));
  return payload;
}

RecordIdentity MakeRecordIdentity(const kv::KvCacheConfig& config,
                                  const kv::ModelFingerprint& fingerprint) {
  RecordIdentity identity;
  identity.fingerprint = fingerprint.ToString();
  identity.block_size = config.block_size;
  for (int g = 0; g < static_cast<int>(config.groups.size()); ++g) {
    identity.group_specs.push_back(fmt::format("{} x{} layers",
                                               kv::DescribeSpec(config.groups[g].spec),
                                               config.groups[g].layers.size()));
    identity.group_block_bytes.push_back(kv::GroupBlockBytes(config, g));
  }
  return identity;
}

std::string FingerprintDigest(const std::string& fingerprint) {
  return fmt::format("{:016x}", XXH3_64bits(fingerprint.data(), fingerprint.size()));
}

}  // namespace kvserve::offload
