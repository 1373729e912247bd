#include "core/stream_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvserve {
namespace {

#if defined(__x86_64__)

// Both copies: memcpy up to dst's next 64-byte boundary, whole 256-byte runs with unaligned
// loads and streaming stores, memcpy for the tail, then a store fence.
size_t HeadBytes(const std::byte* dst, size_t bytes) {
  return std::min(bytes, (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64);
}

__attribute__((target("avx512f"))) void StreamCopyAvx512(std::byte* dst, const std::byte* src,
                                                         size_t bytes) {
  size_t i = HeadBytes(dst, bytes);
  std::memcpy(dst, src, i);
  for (; i + 256 <= bytes; i += 256) {
    const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 64),
                  c = _mm512_loadu_si512(src + i + 128), e = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), e);
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

__attribute__((target("avx2"))) void StreamCopyAvx2(std::byte* dst, const std::byte* src,
                                                    size_t bytes) {
  size_t i = HeadBytes(dst, bytes);
  std::memcpy(dst, src, i);
  for (; i + 256 <= bytes; i += 256) {
    for (size_t k = 0; k < 256; k += 64) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + k));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + k + 32));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + k), a);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + k + 32), b);
    }
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}

enum class CopyPath { kMemcpy, kAvx2, kAvx512 };

CopyPath DetectPath() {
  if (__builtin_cpu_supports("avx512f")) return CopyPath::kAvx512;
  if (__builtin_cpu_supports("avx2")) return CopyPath::kAvx2;
  return CopyPath::kMemcpy;
}

#endif

}  // namespace

void StreamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  static const CopyPath path = DetectPath();
  if (bytes >= kStreamCopyMinBytes && path != CopyPath::kMemcpy) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    if (path == CopyPath::kAvx512) {
      StreamCopyAvx512(d, s, bytes);
    } else {
      StreamCopyAvx2(d, s, bytes);
    }
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace kvserve
