#include "runtime/kernel_clock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

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

void KernelClock::prefer_library(std::string path) { preferred_library_ = std::move(path); }

void KernelClock::add(const std::vector<DeviceInterval>& intervals, std::size_t dropped) {
  const std::lock_guard<std::mutex> lock(mutex_);
  intervals_.insert(intervals_.end(), intervals.begin(), intervals.end());
  dropped_ += dropped;
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
  CUptiResult (*dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
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

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t,
                               size_t valid) {
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
  // Records CUPTI had no buffer space for; the count is reset by asking.
  size_t dropped = 0;
  if (cupti.dropped_records(context, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  KernelClock::instance().add(intervals, dropped);
}

// libcupti from `preferred` where given, else as the build found it, then by soname through the
// loader's path.
void* load_cupti(const std::string& preferred, std::string* tried) {
  std::vector<std::string> names;
  if (!preferred.empty()) names.push_back(preferred);
#ifdef MONET_CUPTI_LIBRARY
  names.emplace_back(MONET_CUPTI_LIBRARY);
#endif
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    names.emplace_back(name);
  }
  for (const std::string& name : names) {
    if (void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    *tried += fmt::format("{}{}", tried->empty() ? "" : ", ", name);
  }
  return nullptr;
}

const char* kind_name(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return "kernel";
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return "copy";
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return "memset";
    default:
      return "activity";
  }
}

// Turns every record kind on; on a refusal turns off those it turned on and says why.
std::string enable_kinds() {
  for (std::size_t i = 0; i < std::size(kKinds); ++i) {
    const CUptiResult r = cupti.enable(kKinds[i]);
    if (r == CUPTI_SUCCESS) continue;
    for (std::size_t j = 0; j < i; ++j) cupti.disable(kKinds[j]);
    return fmt::format("CUPTI would not record {} activity ({})", kind_name(kKinds[i]),
                       result_text(r));
  }
  return {};
}

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

void KernelClock::open() {
  std::string tried;
  void* lib = load_cupti(preferred_library_, &tried);
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
                     bind(lib, "cuptiGetResultString", &cupti.result_string) &&
                     bind(lib, "cuptiActivityGetNumDroppedRecords", &cupti.dropped_records);
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
  // Records on and off once: CUPTI without a driver, or held by another profiler, refuses here.
  reason_ = enable_kinds();
  if (!reason_.empty()) return;
  for (CUpti_ActivityKind kind : kKinds) cupti.disable(kind);
  available_ = true;
}

void KernelClock::start() {
  if (!available()) return;
  cupti.flush_all(0);  // records of work before the window arrive now, and are dropped below
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    intervals_.clear();
    dropped_ = 0;
  }
  cupti.timestamp(&window_start_);
  window_error_ = enable_kinds();
}

DeviceTime KernelClock::stop() {
  DeviceTime t;
  if (!available()) {
    t.error = reason_;
    return t;
  }
  if (!window_error_.empty()) {
    t.error = window_error_;
    return t;
  }
  cupti.flush_all(0);  // blocking: every completed record has reached add() when it returns
  for (CUpti_ActivityKind kind : kKinds) cupti.disable(kind);
  const std::lock_guard<std::mutex> lock(mutex_);
  t.records = intervals_.size();
  if (dropped_ > 0) {
    t.error = fmt::format("CUPTI dropped {} records for want of buffer space", dropped_);
  } else {
    t.seconds = 1e-9 * static_cast<double>(busy_nanoseconds(intervals_, window_start_));
  }
  intervals_.clear();
  dropped_ = 0;
  return t;
}

#else  // no CUPTI headers in this build

void KernelClock::open() { reason_ = "monet was built without CUDA, so without CUPTI"; }
void KernelClock::start() {}
DeviceTime KernelClock::stop() {
  DeviceTime t;
  t.error = reason_;
  return t;
}

#endif

}  // namespace monet
