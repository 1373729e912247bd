#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

namespace kvserve {
namespace {

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    CHECK(fn_ == nullptr) << "ParallelFor is not reentrant";
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  auto [begin, end] = RangeFor(n, grain, 0, num_threads_);
  if (begin < end) fn(begin, end, 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t, int)>* fn;
    size_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
      grain = grain_;
    }
    auto [begin, end] = RangeFor(n, grain, index, num_threads_);
    if (begin < end) (*fn)(begin, end, index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

int DefaultThreadCount() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace kvserve
