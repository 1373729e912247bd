// Stress test for core/thread_pool (its spin-then-block hand-off), kept next to the kernels
// that depend on it.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <sched.h>

#include <array>
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

// Each range index runs exactly once per call, whichever thread claims it.
TEST(ThreadPoolStressTest, EachRangeIndexRunsOncePerCall) {
  ThreadPool pool(3);
  for (int call = 0; call < 300; ++call) {
    std::array<std::atomic<int>, 3> runs{};
    pool.ParallelFor(30, [&runs](size_t begin, size_t end, int index) {
      ASSERT_GE(index, 0);
      ASSERT_LT(index, 3);
      EXPECT_EQ(begin, static_cast<size_t>(index) * 10);
      EXPECT_EQ(end, begin + 10);
      runs[index].fetch_add(1);
    });
    for (int i = 0; i < 3; ++i) ASSERT_EQ(runs[i].load(), 1) << "call " << call << " range " << i;
  }
}

// With every thread of the pool on one CPU (an oversubscribed machine in miniature), the caller
// does not wait for workers the OS has not run yet: it claims their ranges itself. Under the
// old fixed assignment (the caller ran range 0 only) no call could show the caller running two.
TEST(ThreadPoolStressTest, CallerRunsRangesOfWorkersThatHaveNotStarted) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &saved)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // the workers inherit it
  int calls_with_caller_running_more = 0;
  {
    ThreadPool pool(4);
    const std::thread::id caller = std::this_thread::get_id();
    for (int call = 0; call < 200; ++call) {
      std::atomic<int> by_caller{0};
      std::atomic<int> covered{0};
      pool.ParallelFor(4, [&](size_t begin, size_t end, int) {
        if (std::this_thread::get_id() == caller) by_caller.fetch_add(1);
        covered.fetch_add(static_cast<int>(end - begin));
      });
      ASSERT_EQ(covered.load(), 4);
      if (by_caller.load() > 1) ++calls_with_caller_running_more;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_GT(calls_with_caller_running_more, 0);
}

}  // namespace
}  // namespace kvserve
