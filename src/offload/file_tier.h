// FileTier: block records as files under a directory named from the model fingerprint.
//
// Layout: <root_dir>/<FingerprintDigest(fingerprint)>/<first 2 hex digits of the hash>/
//         <BlockKey::ToString()>.kvb, each file one record (offload/record.h). Example:
//   /var/cache/kvserve/3f2a9c0d11e4b7a2/a1/a1b2...ef-g0.kvb
// A model with another fingerprint (weights, architecture, KV formats, block size) uses
// another directory and its records also carry the fingerprint, so it never reads these.
//
// Writes go to a unique temporary name (<name>.tmp.<pid>.<counter>) in the same directory and
// are renamed over the final name, so a reader (of this or another process) sees a whole file
// or none; two servers writing the same key write the same bytes. No fsync: after a power
// loss a file may be torn, which its checksums detect. Directories are created 0700, files
// 0600. The index (key -> file bytes) is rebuilt by scanning at Open; a key missing from it is
// still looked up on disk (another server may have written it). A file that fails its checks
// is deleted, counted in failed_checksums and reported as a miss. I/O failures (read-only or
// missing directory, full disk) are logged, counted in errors and returned as IoError.
//
// Owns: the index. Thread safety: all methods are thread-safe (the index under a mutex; file
// operations outside it).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "offload/record.h"
#include "offload/tier.h"

namespace kvserve::offload {

class FileTier final : public Tier {
 public:
  // Creates <root_dir>/<digest> (0700) when it can and scans it. Never fails: an unusable
  // directory is logged and counted, and every Put then fails (counted) while Gets miss.
  static std::unique_ptr<FileTier> Open(const std::string& root_dir, RecordIdentity identity);

  TierKind kind() const override { return TierKind::kFile; }
  Status Put(const BlockKey& key, std::span<const std::byte> bytes) override;
  Result<std::optional<Bytes>> Get(const BlockKey& key) override;
  // Reads the payload into `payload` and checks it there: straight from the page cache when it
  // holds the record, otherwise with O_DIRECT through this thread's bounce buffer.
  Result<bool> GetInto(const BlockKey& key, std::span<std::byte> payload) override;
  bool Contains(const BlockKey& key) override;

  const std::string& dir() const { return dir_; }  // <root_dir>/<digest>
  std::string PathFor(const BlockKey& key) const;
  size_t num_indexed() const;

 private:
  FileTier(std::string dir, RecordIdentity identity);
  void Scan();
  void IndexAdd(const BlockKey& key, int64_t file_bytes);
  void IndexRemove(const BlockKey& key);
  // Deletes a bad file, counts it, reports a miss.
  void DropCorrupt(const BlockKey& key, const std::string& path, const Status& why);
  Status WriteFile(const BlockKey& key, std::span<const std::byte> bytes);

  const std::string dir_;
  const RecordIdentity identity_;
  std::atomic<uint64_t> temp_counter_{0};
  mutable std::mutex mu_;
  std::unordered_map<BlockKey, int64_t, BlockKeyHasher> index_;  // key -> file bytes
  int64_t indexed_bytes_ = 0;
};

// Parses "<32 hex>-g<group>.kvb"; nullopt for any other name.
std::optional<BlockKey> ParseBlockFileName(std::string_view name);

}  // namespace kvserve::offload
