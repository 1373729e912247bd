// IoPool: a fixed set of threads running queued I/O tasks (tier reads or writes) in FIFO order.
//
// Owns: the threads and the queue. Invariant: pending() counts tasks queued or running.
// Thread safety: Submit, WaitIdle and pending are thread-safe; the destructor runs the tasks
// still queued, then joins.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::offload {

class IoPool {
 public:
  explicit IoPool(int num_threads);
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  void Submit(std::function<void()> task);
  // Blocks until no task is queued or running.
  void WaitIdle();
  int64_t pending() const;
  int num_threads() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  int64_t pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvserve::offload
