// The thread count of the benchmarks: KVSERVE_BENCH_THREADS, default 2 (the machine class of
// docs/PERFORMANCE.md); a value that is not a positive number also gives 2.
#pragma once

#include <cstdlib>

namespace kvserve::bench {

inline int BenchThreads() {
  const char* env = std::getenv("KVSERVE_BENCH_THREADS");
  return env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 2;
}

}  // namespace kvserve::bench
