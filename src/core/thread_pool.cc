#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvserve {
namespace {

// Spin budget before blocking: longer than the gap between two ParallelFor calls of one
// forward step, far shorter than a scheduler tick. Bounded in time, not polls, so a spinner
// on an oversubscribed machine soon blocks and frees its core for the thread it waits for.
constexpr auto kSpinBudget = std::chrono::microseconds(50);
constexpr int kPollsPerClockRead = 32;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done` with pause instructions for up to kSpinBudget; true once it returned true.
template <class Done>
bool SpinUntil(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
  for (;;) {
    for (int i = 0; i < kPollsPerClockRead; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

// Range of thread `t` of `num_threads` over [0, n), aligned to grain.
std::pair<size_t, size_t> RangeFor(size_t n, size_t grain, int t, int num_threads) {
  size_t num_chunks = (n + grain - 1) / grain;
  size_t per = num_chunks / num_threads;
  size_t extra = num_chunks % num_threads;
  size_t begin_chunk = t * per + std::min<size_t>(t, extra);
  size_t end_chunk = begin_chunk + per + (static_cast<size_t>(t) < extra ? 1 : 0);
  return {std::min(n, begin_chunk * grain), std::min(n, end_chunk * grain)};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t, int)>& fn,
                             size_t grain) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  CHECK(!in_call_.exchange(true, std::memory_order_acquire)) << "ParallelFor is not reentrant";
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  ranges_done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Published before generation_: a worker that sees the new generation finds its ranges.
  claim_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
  // seq_cst pairs with the workers' sleeping_workers_ increment: either a worker sees the new
  // generation before it sleeps, or we see it asleep and wake it.
  generation_.store(generation, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  RunRanges(generation);
  AwaitRanges();
  fn_ = nullptr;
  in_call_.store(false, std::memory_order_release);
}

void ThreadPool::RunRanges(uint32_t generation) {
  uint64_t claim = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(claim >> 32) != generation) return;
    const uint32_t index = static_cast<uint32_t>(claim);
    if (index >= static_cast<uint32_t>(num_threads_)) return;
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // `claim` now holds the current value
    }
    // The call cannot end before this range is done, so fn_, n_ and grain_ are its own.
    auto [begin, end] = RangeFor(n_, grain_, static_cast<int>(index), num_threads_);
    if (begin < end) (*fn_)(begin, end, static_cast<int>(index));
    // seq_cst pairs with caller_sleeping_: the caller either sees the last range done or is
    // woken.
    if (ranges_done_.fetch_add(1, std::memory_order_seq_cst) + 1 == num_threads_ &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      ranges_done_.notify_all();
    }
    claim = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::AwaitRanges() {
  auto all_done = [this] { return ranges_done_.load(std::memory_order_acquire) == num_threads_; };
  if (SpinUntil(all_done)) return;
  caller_sleeping_.store(true, std::memory_order_seq_cst);
  for (int done; (done = ranges_done_.load(std::memory_order_seq_cst)) != num_threads_;) {
    ranges_done_.wait(done, std::memory_order_seq_cst);
  }
  caller_sleeping_.store(false, std::memory_order_relaxed);
}

uint32_t ThreadPool::AwaitGeneration(uint32_t seen) {
  uint32_t g = seen;
  if (SpinUntil([&] { return (g = generation_.load(std::memory_order_acquire)) != seen; })) {
    return g;
  }
  sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
  while ((g = generation_.load(std::memory_order_seq_cst)) == seen) {
    generation_.wait(seen, std::memory_order_seq_cst);
  }
  sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
  return g;
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = 0;
  for (;;) {
    seen = AwaitGeneration(seen);
    if (stop_) return;
    RunRanges(seen);
  }
}

int DefaultThreadCount() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace kvserve
