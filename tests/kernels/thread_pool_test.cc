// Stress test for core/thread_pool (its spin-then-block hand-off), kept next to the kernels
// that depend on it.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kvserve {
namespace {

// Runs one ParallelFor and checks every index in [0, n) was visited exactly once.
void ExpectCoversOnce(ThreadPool& pool, size_t n, size_t grain) {
  std::vector<std::atomic<int>> hits(n);
  pool.ParallelFor(
      n,
      [&hits](size_t begin, size_t end, int) {
        for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      },
      grain);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPoolStressTest, ManyBackToBackCalls) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int call = 0; call < 500; ++call) {
      ExpectCoversOnce(pool, static_cast<size_t>(1 + call % 97), static_cast<size_t>(1 + call % 5));
    }
  }
}

// Gaps longer than the spin phase make workers block; every call must still wake them.
TEST(ThreadPoolStressTest, CallsAfterWorkersSleep) {
  ThreadPool pool(3);
  for (int call = 0; call < 20; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    ExpectCoversOnce(pool, 64, 4);
  }
}

// A slow worker range makes the caller block in its wait; it must be woken.
TEST(ThreadPoolStressTest, CallerWaitsForSlowWorker) {
  ThreadPool pool(2);
  for (int call = 0; call < 5; ++call) {
    std::atomic<int> done{0};
    pool.ParallelFor(2, [&done](size_t begin, size_t, int) {
      if (begin == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      done.fetch_add(1);
    });
    EXPECT_EQ(done.load(), 2);
  }
}

}  // namespace
}  // namespace kvserve
