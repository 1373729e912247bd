// ThreadPool: a fixed set of worker threads for data-parallel loops in the forward pass.
//
// ParallelFor splits [0, n) into contiguous ranges, one per thread, in a fixed way that
// depends only on n and the thread count. Kernels must make every output element's result
// independent of which thread computes it (each element is reduced by one thread in a fixed
// order), so that outputs are bit-identical for any thread count (DESIGN.md section 5).
//
// Thread safety: ParallelFor may be called from one thread at a time. It blocks until every
// range is done. No allocation per call.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: ThreadPool(2) starts one worker.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_index) for disjoint ranges covering [0, n).
  // The calling thread runs range 0. Ranges are aligned to `grain` (except the last).
  void ParallelFor(size_t n, const std::function<void(size_t, size_t, int)>& fn,
                   size_t grain = 1);

 private:
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t, int)>* fn_ = nullptr;  // guarded by mu_
  size_t n_ = 0;
  size_t grain_ = 1;
  uint64_t generation_ = 0;  // bumped per ParallelFor call
  int pending_ = 0;          // workers still running the current call
  bool stop_ = false;
};

// The hardware thread count, at least 1.
int DefaultThreadCount();

}  // namespace kvserve
