#include "runtime/kernel_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#ifdef MONET_HAVE_CUPTI
#include <cupti_activity.h>
#include <dlfcn.h>
#endif

namespace monet {

std::uint64_t busy_nanoseconds(std::vector<DeviceInterval>& intervals, std::uint64_t from) {
  std::sort(intervals.begin(), intervals.end());
  std::uint64_t busy = 0;
  std::uint64_t covered = from;  // everything before it is counted or outside the window
  for (const auto& [start, end] : intervals) {
    const std::uint64_t lo = std::max(start, covered);
    if (end > lo) {
      busy += end - lo;
      covered = end;
    }
  }
  return busy;
}

KernelClock& KernelClock::instance() {
  static KernelClock* clock = new KernelClock();  // never destroyed: CUPTI may call it at exit
  return *clock;
}

bool KernelClock::available() {
  std::call_once(opened_, [this] { open(); });
  return available_;
}

const std::string& KernelClock::unavailable_reason() {
  available();
  return reason_;
}

void KernelClock::add(const std::vector<DeviceInterval>& intervals) {
  const std::lock_guard<std::mutex> lock(mutex_);
  intervals_.insert(intervals_.end(), intervals.begin(), intervals.end());
}

#ifdef MONET_HAVE_CUPTI

namespace {

// The CUPTI functions the clock calls, from the libcupti that dlopen found.
struct CuptiApi {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
};

CuptiApi cupti;

// The kinds of device work a stage's time is made of.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

constexpr std::size_t kBufferBytes = 1 << 20;

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  if (cupti.result_string == nullptr || cupti.result_string(r, &text) != CUPTI_SUCCESS ||
      text == nullptr) {
    return fmt::format("CUPTI error {}", static_cast<int>(r));
  }
  return text;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte alignment.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<DeviceInterval> intervals;
  CUpti_Activity* record = nullptr;
  while (cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        intervals.emplace_back(k->start, k->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        intervals.emplace_back(m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        intervals.emplace_back(m->start, m->end);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  KernelClock::instance().add(intervals);
}

// libcupti as the build found it, then by soname through the loader's path.
void* load_cupti(std::string* tried) {
  const char* names[] = {
#ifdef MONET_CUPTI_LIBRARY
      MONET_CUPTI_LIBRARY,
#endif
      "libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const char* name : names) {
    if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
    *tried += fmt::format("{}{}", tried->empty() ? "" : ", ", name);
  }
  return nullptr;
}

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

void KernelClock::open() {
  std::string tried;
  void* lib = load_cupti(&tried);
  if (lib == nullptr) {
    reason_ = fmt::format("libcupti could not be loaded (tried {})", tried);
    return;
  }
  const bool bound = bind(lib, "cuptiActivityRegisterCallbacks", &cupti.register_callbacks) &&
                     bind(lib, "cuptiActivityEnable", &cupti.enable) &&
                     bind(lib, "cuptiActivityDisable", &cupti.disable) &&
                     bind(lib, "cuptiActivityFlushAll", &cupti.flush_all) &&
                     bind(lib, "cuptiActivityGetNextRecord", &cupti.next_record) &&
                     bind(lib, "cuptiGetTimestamp", &cupti.timestamp) &&
                     bind(lib, "cuptiGetResultString", &cupti.result_string);
  if (!bound) {
    reason_ = "the libcupti found lacks the activity API";
    return;
  }
  const CUptiResult r = cupti.register_callbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    reason_ =
        fmt::format("CUPTI refused monet's activity callbacks ({}); another profiler may hold them",
                    result_text(r));
    return;
  }
  available_ = true;
}

void KernelClock::start() {
  if (!available()) return;
  cupti.flush_all(0);  // records of work before the window arrive now, and are dropped below
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    intervals_.clear();
  }
  cupti.timestamp(&window_start_);
  for (CUpti_ActivityKind kind : kKinds) cupti.enable(kind);
}

double KernelClock::stop() {
  if (!available()) return 0.0;
  cupti.flush_all(0);  // blocking: every completed record has reached add() when it returns
  for (CUpti_ActivityKind kind : kKinds) cupti.disable(kind);
  const std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t busy = busy_nanoseconds(intervals_, window_start_);
  intervals_.clear();
  return 1e-9 * static_cast<double>(busy);
}

#else  // no CUPTI headers in this build

void KernelClock::open() { reason_ = "monet was built without CUDA, so without CUPTI"; }
void KernelClock::start() {}
double KernelClock::stop() { return 0.0; }

#endif

}  // namespace monet
