#include "offload/file_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/log.h"

namespace kvserve::offload {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSuffix = ".kvb";
constexpr std::string_view kTempMarker = ".tmp.";
// A temporary file older than this is a leftover of a crashed writer.
constexpr auto kStaleTempAge = std::chrono::minutes(10);

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// mkdir -p with mode 0700 for every directory it creates.
Status MakeDirs(const std::string& path) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return IoError(fmt::format("mkdir {}: {}", partial, std::strerror(errno)));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return IoError(fmt::format("{} is not a directory", path));
  }
  return Status::Ok();
}

bool ParseHex64(std::string_view text, uint64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// Reads exactly out.size() bytes at `offset`; false on a short read or error (errno set).
bool PreadAll(int fd, std::span<std::byte> out, off_t offset) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Whether every page of the file's first `bytes` bytes is in the page cache, asked without
// starting any I/O (cachestat(2), Linux 6.5). True where the kernel cannot say (older kernels,
// other architectures): those keep the buffered read.
bool FullyCached(int fd, size_t bytes) {
#if defined(__x86_64__)
  constexpr long kCachestat = 451;  // __NR_cachestat on x86_64 (not in older kernel headers)
  struct Range {
    uint64_t off, len;
  } range{0, bytes};
  struct Stat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } stat{};
  if (::syscall(kCachestat, fd, &range, &stat, 0) != 0) return true;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return stat.nr_cache >= (bytes + page - 1) / page;
#else
  (void)fd, (void)bytes;
  return true;
#endif
}

// Reads a whole record file of header.size() + payload.size() bytes into header and payload.
// A file the page cache holds (written or read lately) is read from it (one copy, no disk
// access). Any other is read with O_DIRECT into this thread's page-aligned bounce buffer, then
// copied into place: the disk's DMA lands in memory once and the kernel neither fills the page
// cache nor copies out of it, about half the CPU time of a buffered read (plain memcpy: the
// caller's checksum reads the payload right after, from this core's cache). Where O_DIRECT is
// refused (tmpfs, some network filesystems), a buffered read. False on a short read or an
// error (errno set).
bool ReadRecord(int fd, std::span<std::byte> header, std::span<std::byte> payload) {
  const size_t total = header.size() + payload.size();
  auto buffered = [&] { return PreadAll(fd, header, 0) && PreadAll(fd, payload, header.size()); };
  if (FullyCached(fd, total)) return buffered();
  constexpr size_t kDirectAlign = 4096;  // a multiple of every logical block size
  const size_t rounded = (total + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  thread_local std::unique_ptr<std::byte, decltype(&std::free)> bounce(nullptr, &std::free);
  thread_local size_t bounce_bytes = 0;
  if (bounce_bytes < rounded) {
    bounce.reset(static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, rounded)));
    bounce_bytes = bounce ? rounded : 0;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (bounce == nullptr || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    return buffered();
  }
  ssize_t n;
  do {
    n = ::pread(fd, bounce.get(), rounded, 0);  // one read: the file ends at `total`
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(total)) {
    std::memcpy(header.data(), bounce.get(), header.size());
    std::memcpy(payload.data(), bounce.get() + header.size(), payload.size());
    return true;
  }
  if (n >= 0 || errno != EINVAL) return false;  // short (the file changed) or an I/O error
  (void)::fcntl(fd, F_SETFL, flags);             // O_DIRECT refused for this transfer
  return buffered();
}

Status WriteAll(int fd, std::span<const std::byte> a, std::span<const std::byte> b) {
  size_t total = a.size() + b.size(), done = 0;
  while (done < total) {
    iovec iov[2];
    int n_iov = 0;
    if (done < a.size()) {
      iov[n_iov++] = {const_cast<std::byte*>(a.data() + done), a.size() - done};
      iov[n_iov++] = {const_cast<std::byte*>(b.data()), b.size()};
    } else {
      iov[n_iov++] = {const_cast<std::byte*>(b.data() + (done - a.size())),
                      b.size() - (done - a.size())};
    }
    ssize_t n = ::writev(fd, iov, n_iov);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return IoError(std::strerror(n < 0 ? errno : ENOSPC));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

std::optional<BlockKey> ParseBlockFileName(std::string_view name) {
  // "<32 hex>-g<group>.kvb"
  if (name.size() < 32 + 2 + 1 + kSuffix.size() || !name.ends_with(kSuffix)) return std::nullopt;
  if (name.substr(32, 2) != "-g") return std::nullopt;
  BlockKey key;
  if (!ParseHex64(name.substr(0, 16), &key.hash.high) ||
      !ParseHex64(name.substr(16, 16), &key.hash.low)) {
    return std::nullopt;
  }
  std::string_view group = name.substr(34, name.size() - 34 - kSuffix.size());
  auto [ptr, ec] = std::from_chars(group.data(), group.data() + group.size(), key.group);
  if (ec != std::errc() || ptr != group.data() + group.size() || key.group < 0) {
    return std::nullopt;
  }
  return key;
}

FileTier::FileTier(std::string dir, RecordIdentity identity)
    : dir_(std::move(dir)), identity_(std::move(identity)) {}

std::unique_ptr<FileTier> FileTier::Open(const std::string& root_dir, RecordIdentity identity) {
  std::string dir = root_dir + "/" + FingerprintDigest(identity.fingerprint);
  std::unique_ptr<FileTier> tier(new FileTier(dir, std::move(identity)));
  Status made = MakeDirs(dir);
  if (!made.ok()) {
    tier->counters_.errors.fetch_add(1, std::memory_order_relaxed);
    KV_LOG(WARNING, "offload file tier: {} (serving without it until it is writable)",
           made.ToString());
  }
  tier->Scan();
  KV_LOG(INFO, "offload file tier: {} holds {} blocks", dir, tier->num_indexed());
  return tier;
}

void FileTier::Scan() {
  std::error_code ec;
  fs::directory_iterator top(dir_, ec), end;
  if (ec) return;
  const auto now = fs::file_time_type::clock::now();
  for (; top != end; top.increment(ec)) {
    if (ec) break;
    if (!top->is_directory(ec)) continue;
    std::error_code sub_ec;
    for (fs::directory_iterator it(top->path(), sub_ec); !sub_ec && it != end;
         it.increment(sub_ec)) {
      const std::string name = it->path().filename().string();
      if (name.find(kTempMarker) != std::string::npos) {
        std::error_code time_ec;
        auto mtime = fs::last_write_time(it->path(), time_ec);
        if (!time_ec && now - mtime > kStaleTempAge) fs::remove(it->path(), time_ec);
        continue;
      }
      std::optional<BlockKey> key = ParseBlockFileName(name);
      std::error_code size_ec;
      const auto size = it->file_size(size_ec);
      if (key && !size_ec) IndexAdd(*key, static_cast<int64_t>(size));
    }
  }
}

std::string FileTier::PathFor(const BlockKey& key) const {
  const std::string name = key.ToString();
  return fmt::format("{}/{}/{}{}", dir_, name.substr(0, 2), name, kSuffix);
}

void FileTier::IndexAdd(const BlockKey& key, int64_t file_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!index_.emplace(key, file_bytes).second) return;
  indexed_bytes_ += file_bytes;
  counters_.usage_bytes.store(indexed_bytes_, std::memory_order_relaxed);
  counters_.num_blocks.store(static_cast<int64_t>(index_.size()), std::memory_order_relaxed);
}

void FileTier::IndexRemove(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  indexed_bytes_ -= it->second;
  index_.erase(it);
  counters_.usage_bytes.store(indexed_bytes_, std::memory_order_relaxed);
  counters_.num_blocks.store(static_cast<int64_t>(index_.size()), std::memory_order_relaxed);
}

size_t FileTier::num_indexed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

bool FileTier::Contains(const BlockKey& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) != 0) return true;
  }
  struct stat st;
  if (::stat(PathFor(key).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  IndexAdd(key, st.st_size);  // written by another server sharing the directory
  return true;
}

void FileTier::DropCorrupt(const BlockKey& key, const std::string& path, const Status& why) {
  counters_.failed_checksums.fetch_add(1, std::memory_order_relaxed);
  KV_LOG(WARNING, "offload file tier: deleting {}: {}", path, why.ToString());
  ::unlink(path.c_str());
  IndexRemove(key);
}

Result<bool> FileTier::GetInto(const BlockKey& key, std::span<std::byte> payload) {
  const auto start = std::chrono::steady_clock::now();
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  const std::string path = PathFor(key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      IndexRemove(key);
      return false;
    }
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return IoError(fmt::format("open {}: {}", path, std::strerror(errno)));
  }
  const std::string& spec = identity_.group_specs.at(key.group);
  const size_t header_bytes = kRecordFixedHeaderBytes + identity_.fingerprint.size() +
                              spec.size() + 8;
  const size_t payload_bytes = static_cast<size_t>(identity_.group_block_bytes.at(key.group));
  CHECK_EQ(payload.size(), payload_bytes);
  struct stat st;
  Bytes header(header_bytes);
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = IoError(fmt::format("fstat {}: {}", path, std::strerror(errno)));
  } else if (static_cast<size_t>(st.st_size) != header_bytes + payload_bytes) {
    status = Corrupt(fmt::format("file of {} bytes, expected {}", st.st_size,
                                 header_bytes + payload_bytes));
  } else if (!ReadRecord(fd, header, payload)) {
    status = IoError(fmt::format("read {}: {}", path, std::strerror(errno)));
  } else {
    Result<RecordHeader> parsed = ParseRecordHeader(identity_, key, header);
    status = parsed.ok() ? VerifyPayload(*parsed, payload) : parsed.status();
  }
  ::close(fd);
  if (status.code() == StatusCode::kCorrupt) {
    DropCorrupt(key, path, status);
    return false;
  }
  if (!status.ok()) {
    counters_.errors.fetch_add(1, std::memory_order_relaxed);
    return status;
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  counters_.loads.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_loaded.fetch_add(static_cast<int64_t>(payload.size()),
                                   std::memory_order_relaxed);
  counters_.load_latency.Observe(SecondsSince(start));
  return true;
}

Result<std::optional<Bytes>> FileTier::Get(const BlockKey& key) {
  Bytes payload(static_cast<size_t>(identity_.group_block_bytes.at(key.group)));
  KV_ASSIGN_OR_RETURN(bool hit, GetInto(key, payload));
  if (!hit) return std::optional<Bytes>();
  return std::optional<Bytes>(std::move(payload));
}

Status FileTier::Put(const BlockKey& key, std::span<const std::byte> bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) != 0) return Status::Ok();
  }
  const auto start = std::chrono::steady_clock::now();
  Status status = WriteFile(key, bytes);
  if (!status.ok()) {
    const int64_t n = counters_.errors.fetch_add(1, std::memory_order_relaxed);
    if ((n & (n - 1)) == 0) {  // log the 1st, 2nd, 4th, 8th, ... failure
      KV_LOG(WARNING, "offload file tier: write failed ({} so far): {}", n + 1,
             status.ToString());
    }
    return status;
  }
  counters_.stores.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_stored.fetch_add(static_cast<int64_t>(bytes.size()), std::memory_order_relaxed);
  counters_.store_latency.Observe(SecondsSince(start));
  return Status::Ok();
}

Status FileTier::WriteFile(const BlockKey& key, std::span<const std::byte> bytes) {
  const std::string path = PathFor(key);
  KV_RETURN_IF_ERROR(MakeDirs(path.substr(0, path.rfind('/'))));
  const std::string temp = fmt::format("{}{}{}.{}", path, kTempMarker, ::getpid(),
                                       temp_counter_.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IoError(fmt::format("create {}: {}", temp, std::strerror(errno)));
  const Bytes header = EncodeRecordHeader(identity_, key, bytes);
  Status status = WriteAll(fd, header, bytes);
  if (::close(fd) != 0 && status.ok()) {
    status = IoError(fmt::format("close {}: {}", temp, std::strerror(errno)));
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = IoError(fmt::format("rename {}: {}", temp, std::strerror(errno)));
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status.WithContext("writing " + path);
  }
  IndexAdd(key, static_cast<int64_t>(header.size() + bytes.size()));
  return Status::Ok();
}

}  // namespace kvserve::offload
