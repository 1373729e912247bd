// ThreadPool: a fixed set of worker threads for data-parallel loops in the forward pass.
//
// ParallelFor splits [0, n) into contiguous ranges, one per thread (num_threads ranges), in a
// fixed way that depends only on n and the thread count. Kernels must make every output
// element's result independent of which thread computes it (each element is reduced by one
// thread in a fixed order), so that outputs are bit-identical for any thread count (DESIGN.md
// section 5).
//
// Who runs which range is not fixed: the caller and the workers claim ranges one at a time,
// the caller starting with range 0, and the call returns once every range is done. A worker
// that the OS has not scheduled yet claims nothing and is not waited for, so on an
// oversubscribed machine (more runnable threads than cores) the caller runs the ranges its
// descheduled workers did not take instead of waiting a scheduler time slice per call
// (measured: ~100 calls per decoded token made a 2-thread server 50-100x slower under a load
// of 8 on 2 cores). fn's third argument is the range's index (< num_threads()), not the OS
// thread's: each index runs exactly once per call, on one thread, so per-index scratch
// (samplers_[i], scratch.thread(i)) is never shared by two threads at once.
//
// Thread safety: ParallelFor may be called from one thread at a time. It blocks until every
// range is done. No allocation per call.
//
// Hand-off: the forward pass calls ParallelFor ~100 times per decoded token, so a futex wake
// per call would dominate. Workers and the caller first spin (with a pause instruction) on
// atomic counters for up to ~50 us, and only then block in a futex wait (std::atomic::wait);
// wake-ups are issued only when someone actually sleeps.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
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

  // Calls fn(begin, end, range_index) for disjoint ranges covering [0, n), range_index <
  // num_threads(); empty ranges are skipped. Ranges are aligned to `grain` (except the last).
  void ParallelFor(size_t n, const std::function<void(size_t, size_t, int)>& fn, size_t grain = 1);

 private:
  void WorkerLoop();
  // Returns the first generation different from `seen` (spins, then blocks).
  uint32_t AwaitGeneration(uint32_t seen);
  // Claims and runs ranges of call `generation` until none is left (or that call is over).
  void RunRanges(uint32_t generation);
  // Blocks the caller until every range of the current call is done (spins, then blocks).
  void AwaitRanges();

  int num_threads_;
  std::vector<std::thread> workers_;
  // The current call, written by the caller before generation_ is bumped (release) and read
  // by workers after they observe the new generation (acquire).
  const std::function<void(size_t, size_t, int)>* fn_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;
  bool stop_ = false;
  std::atomic<uint32_t> generation_{0};       // bumped per ParallelFor call (and at shutdown)
  // (generation << 32) | the next unclaimed range of that generation's call. Claimed by
  // compare-exchange, so a thread that read an older call's value claims nothing of a newer.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> ranges_done_{0};           // ranges of the current call finished
  std::atomic<int> sleeping_workers_{0};      // workers blocked in generation_.wait
  std::atomic<bool> caller_sleeping_{false};  // caller blocked in pending_.wait
  std::atomic<bool> in_call_{false};          // catches reentrant / concurrent calls
};

// The hardware thread count, at least 1.
int DefaultThreadCount();

}  // namespace kvserve
