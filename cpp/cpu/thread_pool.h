// A small persistent thread pool: parallel_for over an index range with
// dynamic chunking. The calling thread works too.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace splat::cpu {

class ThreadPool {
 public:
  // threads = 0: one per hardware thread.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks of [0, n) of at most `grain`
  // indices, on every thread; returns when all are done. Callers from several
  // threads take turns (every CPU device shares the process-wide pool); not
  // reentrant: fn must not call parallel_for.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  // The process-wide pool.
  static ThreadPool& shared();

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0, job_grain_ = 1;
  std::atomic<size_t> next_{0};
  unsigned generation_ = 0;
  unsigned busy_ = 0;
  bool stop_ = false;
};

}  // namespace splat::cpu
