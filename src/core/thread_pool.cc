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
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
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
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with the workers' sleeping_workers_ increment: either a worker sees the new
  // generation before it sleeps, or we see it asleep and wake it.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  auto [begin, end] = RangeFor(n, grain, 0, num_threads_);
  if (begin < end) fn(begin, end, 0);
  AwaitWorkers();
  fn_ = nullptr;
  in_call_.store(false, std::memory_order_release);
}

void ThreadPool::AwaitWorkers() {
  if (SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; })) return;
  caller_sleeping_.store(true, std::memory_order_seq_cst);
  for (int p; (p = pending_.load(std::memory_order_seq_cst)) != 0;) {
    pending_.wait(p, std::memory_order_seq_cst);
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

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    seen = AwaitGeneration(seen);
    if (stop_) return;
    auto [begin, end] = RangeFor(n_, grain_, index, num_threads_);
    if (begin < end) (*fn_)(begin, end, index);
    // seq_cst pairs with caller_sleeping_: the caller either sees 0 or is woken.
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      pending_.notify_all();
    }
  }
}

int DefaultThreadCount() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace kvserve
