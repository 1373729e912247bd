// libFuzzer target: the tier record parser (offload/record.h), which reads blocks back from
// files and Redis. Two properties per input:
//   1. the input as a record: DecodeRecord returns a payload inside it or a Status;
//   2. a record encoded from a payload of the input's bytes, with bytes flipped at input-chosen places:
//      it decodes to exactly the original payload when nothing was flipped, and is refused
//      whenever a flip changed it (the checksums cover every byte).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "offload/record.h"

namespace {

kvserve::offload::RecordIdentity Identity() {
  kvserve::offload::RecordIdentity id;
  id.fingerprint = "llama|fuzz|f16|bs16";
  id.group_specs = {"full_attention(kv_heads=4, head_dim=8, f16) x5 layers",
                    "sliding_window(window=64, kv_heads=2, head_dim=8, f16) x2 layers"};
  id.group_block_bytes = {64, 32};
  id.block_size = 16;
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve::offload;
  static const RecordIdentity identity = Identity();
  const BlockKey key{{0x0123456789abcdefull, 0xfedcba9876543210ull}, static_cast<int>(size % 2)};
  const auto input = std::as_bytes(std::span<const uint8_t>(data, size));

  auto decoded = DecodeRecord(identity, key, input);
  if (decoded.ok() && (decoded->data() < input.data() ||
                       decoded->data() + decoded->size() > input.data() + input.size())) {
    __builtin_trap();
  }

  if (size < 2) return 0;
  const size_t num_flips = data[0] % 4;
  // A payload of the group's block size, filled with the input's bytes.
  Bytes payload(static_cast<size_t>(identity.group_block_bytes[key.group]));
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = input[1 + i % (size - 1)];
  Bytes record = EncodeRecord(identity, key, payload);
  bool changed = false;
  for (size_t i = 0; i < num_flips && 1 + 2 * i + 1 < size; ++i) {
    const size_t at = (static_cast<size_t>(data[1 + 2 * i]) * 131 + i) % record.size();
    const auto mask = static_cast<std::byte>(data[2 + 2 * i] | 1);
    record[at] ^= mask;
    changed = true;
  }
  auto back = DecodeRecord(identity, key, record);
  if (!changed) {
    if (!back.ok() || back->size() != payload.size() ||
        (payload.size() > 0 && std::memcmp(back->data(), payload.data(), payload.size()) != 0)) {
      __builtin_trap();
    }
  } else if (back.ok()) {
    // Two flips may cancel out (same byte, same mask): then the record is unchanged.
    Bytes original = EncodeRecord(identity, key, payload);
    if (original != record) __builtin_trap();
  }
  return 0;
}
