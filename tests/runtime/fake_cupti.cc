// A CUPTI without a device, for the kernel clock's tests. It holds the device work a test says ran
// (fake_cupti_ran), recording it only while kernel records are on as CUPTI does, hands it to the
// registered callbacks at a flush as kernel records, and, when told, refuses to turn records on or
// drops records.
#include <cupti_activity.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

struct State {
  std::mutex mutex;
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  std::vector<CUpti_ActivityKernel10> recorded;
  int kinds_on = 0;
  bool kernels_on = false;
  CUptiResult refusal = CUPTI_SUCCESS;
  std::size_t dropped = 0;
  std::uint64_t now = 0;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

extern "C" {

// Test controls.
void fake_cupti_ran(std::uint64_t start, std::uint64_t end) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.kernels_on) return;
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = end;
  s.recorded.push_back(k);
}
void fake_cupti_refuse_records(int result) { state().refusal = static_cast<CUptiResult>(result); }
void fake_cupti_drop(std::size_t records) { state().dropped += records; }
void fake_cupti_set_now(std::uint64_t ns) { state().now = ns; }
int fake_cupti_kinds_on() { return state().kinds_on; }

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  state().request = request;
  state().complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  State& s = state();
  if (s.refusal != CUPTI_SUCCESS) return s.refusal;
  ++s.kinds_on;
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) s.kernels_on = true;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  State& s = state();
  if (s.kinds_on > 0) --s.kinds_on;
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) s.kernels_on = false;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  State& s = state();
  std::vector<CUpti_ActivityKernel10> records;
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    records.swap(s.recorded);
  }
  if (records.empty() && s.dropped == 0) return CUPTI_SUCCESS;
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  s.request(&buffer, &size, &max_records);
  const size_t valid = records.size() * sizeof(CUpti_ActivityKernel10);
  if (buffer == nullptr || size < valid) return CUPTI_ERROR_UNKNOWN;
  std::memcpy(buffer, records.data(), valid);
  s.complete(nullptr, 0, buffer, size, valid);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  uint8_t* next = *record == nullptr
                      ? buffer
                      : reinterpret_cast<uint8_t*>(*record) + sizeof(CUpti_ActivityKernel10);
  if (next + sizeof(CUpti_ActivityKernel10) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  *dropped = state().dropped;
  state().dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  *timestamp = state().now;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
              ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
              : "a fake CUPTI error";
  return CUPTI_SUCCESS;
}

}  // extern "C"
