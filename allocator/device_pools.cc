#include "allocator/device_pools.h"

#include <fmt/format.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "allocator/host_backend.h"
#include "common/env.h"
#include "common/log.h"
#include "monet/bytes.h"
#include "monet/errors.h"
#ifdef MONET_HAVE_CUDA
#include "allocator/cuda_backend.h"
#endif

namespace monet::pools {
namespace {

constexpr int kMaxDevices = 64;
constexpr std::size_t kCpuGranule = std::size_t{64} << 10;

struct Pool {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CachingAllocator> allocator;
};

struct State {
  std::mutex mutex;
  const CudaApi* cuda_api = nullptr;
  int cuda_devices = 0;
  std::unique_ptr<TraceWriter> trace;
  bool trace_opened = false;
  std::atomic<CachingAllocator*> cpu{nullptr};
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> cuda{};
  std::vector<Pool> pools;
};

void lock_before_fork();
void unlock_in_parent();
void unlock_in_child();

// Never destroyed: see the header.
State& state() {
  static State* s = [] {
    auto* made = new State;
    pthread_atfork(&lock_before_fork, &unlock_in_parent, &unlock_in_child);
    return made;
  }();
  return *s;
}

// fork() copies only the thread that calls it: a lock another thread held at that moment would
// stay held in the child for ever, and its first allocation would wait for it (PyTorch's
// DataLoader forks its workers from a process whose threads may be allocating). Every lock is
// taken before the fork, in the order the code takes them (the registry, a pool, the trace), and
// let go after it in both processes.
void lock_before_fork() {
  State& s = state();
  s.mutex.lock();
  for (Pool& p : s.pools) p.allocator->lock_for_fork();
  if (s.trace) s.trace->lock_for_fork();
}

void unlock_after_fork(bool in_child) {
  State& s = state();
  if (s.trace) s.trace->unlock_after_fork(in_child);
  // A child forked before the trace was opened does not open one either: its pools are copies of
  // the parent's, and the trace is the parent's to write.
  if (in_child) s.trace_opened = true;
  for (auto p = s.pools.rbegin(); p != s.pools.rend(); ++p) p->allocator->unlock_after_fork();
  s.mutex.unlock();
}

void unlock_in_parent() { unlock_after_fork(/*in_child=*/false); }
void unlock_in_child() { unlock_after_fork(/*in_child=*/true); }

// Opened with the first pool, not at start: a process that never allocates through monet (a shell
// or a tool the job runs with MONET_TRACE in its environment) leaves the trace alone.
TraceWriter* trace_writer(State& s) {
  if (!s.trace_opened) {
    s.trace_opened = true;
    if (auto path = env_value("MONET_TRACE")) {
      try {
        s.trace = std::make_unique<TraceWriter>(*path);
      } catch (const ConfigError& e) {
        // Checked at start, so a file this process could not make after all (another process's
        // trace beside it, in a folder it cannot write): its pools serve without a trace.
        log(LogLevel::kWarn, "{} This process records no trace.", e.what());
      }
    }
  }
  return s.trace.get();
}

std::size_t budget_from(const char* variable, std::size_t device_total) {
  const auto text = env_value(variable);
  return text ? parse_budget(*text, device_total, variable) : 0;
}

CachingAllocator& make_pool(State& s, std::unique_ptr<Backend> backend, const char* budget_var) {
  CachingAllocator::Options options;
  options.budget_bytes = budget_var ? budget_from(budget_var, backend->total_bytes()) : 0;
  if (budget_var) options.budget_variable = budget_var;
  options.trace = trace_writer(s);
  auto allocator = std::make_unique<CachingAllocator>(*backend, options);
  CachingAllocator& result = *allocator;
  log(LogLevel::kInfo, "pool for {} with budget {}", result.device_name(),
      options.budget_bytes ? format_bytes(options.budget_bytes) : std::string("none"));
  s.pools.push_back({std::move(backend), std::move(allocator)});
  return result;
}

// MONET_CUDA_SEGMENTS: whole (cudaMalloc) or expandable (the driver's virtual memory API).
bool cuda_segments_expandable() {
  const auto value = env_value("MONET_CUDA_SEGMENTS");
  if (!value || *value == "whole") return false;
  if (*value == "expandable") return true;
  throw ConfigError(fmt::format(
      "MONET_CUDA_SEGMENTS='{}' is not a way to hold CUDA memory. Use whole or expandable.",
      *value));
}

}  // namespace

void set_cuda_api(const CudaApi* api) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cuda_api = api;
#ifdef MONET_HAVE_CUDA
  s.cuda_devices = api ? std::min(cuda_device_count(*api), kMaxDevices) : 0;
#endif
}

int cuda_devices() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.cuda_devices;
}

CachingAllocator& cpu() {
  State& s = state();
  if (CachingAllocator* a = s.cpu.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (CachingAllocator* a = s.cpu.load(std::memory_order_relaxed)) return *a;
  const char* budget_var = s.cuda_devices > 0 ? "MONET_CPU_BUDGET" : "MONET_BUDGET";
  // Host pages are given back by madvise at any page boundary: a granule of 64 KiB rather than
  // CUDA's 2 MiB keeps what partly used granules hold (fragmentation under a budget) small.
  HostBackend::Options host;
  host.granularity = kCpuGranule;
  CachingAllocator& a = make_pool(s, std::make_unique<HostBackend>(host), budget_var);
  s.cpu.store(&a, std::memory_order_release);
  return a;
}

CachingAllocator& cuda(int device) {
  State& s = state();
  if (device >= 0 && device < kMaxDevices) {
    if (CachingAllocator* a = s.cuda[device].load(std::memory_order_acquire)) return *a;
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device < 0 || device >= s.cuda_devices) {
    throw std::out_of_range(
        fmt::format("monet: cuda:{} is not a device monet can use ({} CUDA devices found)", device,
                    s.cuda_devices));
  }
  if (CachingAllocator* a = s.cuda[device].load(std::memory_order_relaxed)) return *a;
#ifdef MONET_HAVE_CUDA
  const CudaDriverApi* driver = nullptr;
  if (cuda_segments_expandable()) {
    driver = cuda_driver_api();
    if (driver == nullptr) {
      throw ConfigError(
          "MONET_CUDA_SEGMENTS=expandable needs the CUDA driver's virtual memory API, which "
          "libcuda.so.1 does not provide here. Unset MONET_CUDA_SEGMENTS to use whole segments.");
    }
  }
  CachingAllocator& a =
      make_pool(s, std::make_unique<CudaBackend>(*s.cuda_api, device, driver), "MONET_BUDGET");
  s.cuda[device].store(&a, std::memory_order_release);
  return a;
#else
  throw std::logic_error("monet was built without CUDA");
#endif
}

CachingAllocator* cuda_if_made(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return state().cuda[device].load(std::memory_order_acquire);
}

std::vector<CachingAllocator*> all() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<CachingAllocator*> result;
  for (const Pool& p : s.pools) result.push_back(p.allocator.get());
  return result;
}

void validate_environment() {
  log(LogLevel::kDebug, "knobs:\n{}", describe_knobs());
  const std::size_t ram = physical_memory_bytes();
  budget_from("MONET_BUDGET", ram);
  budget_from("MONET_CPU_BUDGET", ram);
  cuda_segments_expandable();
  if (auto stats = env_value("MONET_STATS");
      stats && *stats != "0" && *stats != "1" && *stats != "auto") {
    throw ConfigError(fmt::format(
        "MONET_STATS='{}' is not 1, 0 or auto. Use 1 (print the allocator's statistics at exit), "
        "0 (never) or auto (the default: under the preload or the pluggable hook), or unset it.",
        *stats));
  }
  if (auto path = env_value("MONET_TRACE")) check_trace_path(*path);
}

void print_stats() {
  for (CachingAllocator* a : all()) {
    std::string text = format_stats(a->stats());
    if (!text.empty() && text.back() == '\n') text.pop_back();
    write_log_line(text);
  }
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.trace) s.trace->flush();
}

namespace {
bool g_report_by_default = false;

void report_now() {
  const auto value = env_value("MONET_STATS");
  const bool wanted = value && *value == "1"   ? true
                      : value && *value == "0" ? false
                                               : (g_report_by_default && any_allocations()) ||
                                                     log_level() >= LogLevel::kInfo;
  if (wanted) print_stats();
}
}  // namespace

void report_at_exit(bool by_default) {
  static std::once_flag once;
  std::call_once(once, [&] {
    g_report_by_default = by_default;
    std::atexit(&report_now);
  });
}

bool any_allocations() {
  for (CachingAllocator* a : all()) {
    if (a->stats().allocations > 0) return true;
  }
  return false;
}

}  // namespace monet::pools
