// The six numbers the memory model keeps per stage and variant (include/monet/chain.h), as an
// index, so that the predictor can treat them uniformly: four byte counts and two times.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "monet/chain.h"

namespace monet {

enum class Quantity : int { kOutBytes, kSavedBytes, kFwdPeak, kBwdPeak, kFwdTime, kBwdTime };

inline constexpr int kNumQuantities = 6;

inline constexpr std::array<Quantity, kNumQuantities> kAllQuantities = {
    Quantity::kOutBytes, Quantity::kSavedBytes, Quantity::kFwdPeak,
    Quantity::kBwdPeak,  Quantity::kFwdTime,    Quantity::kBwdTime};

// Bytes are exact functions of the shape; times are noisy. The predictor treats them apart.
constexpr bool is_bytes(Quantity q) { return q != Quantity::kFwdTime && q != Quantity::kBwdTime; }

// The field's name in VariantCosts and in the chain JSON ("out_bytes", ..., "bwd_time").
constexpr const char* quantity_name(Quantity q) {
  constexpr const char* kNames[kNumQuantities] = {"out_bytes", "saved_bytes", "fwd_peak",
                                                  "bwd_peak",  "fwd_time",    "bwd_time"};
  return kNames[static_cast<int>(q)];
}

// The value of `q` in `costs`, in bytes or seconds.
inline double quantity_value(const VariantCosts& costs, Quantity q) {
  switch (q) {
    case Quantity::kOutBytes:
      return static_cast<double>(costs.out_bytes);
    case Quantity::kSavedBytes:
      return static_cast<double>(costs.saved_bytes);
    case Quantity::kFwdPeak:
      return static_cast<double>(costs.fwd_peak);
    case Quantity::kBwdPeak:
      return static_cast<double>(costs.bwd_peak);
    case Quantity::kFwdTime:
      return costs.fwd_time;
    case Quantity::kBwdTime:
      return costs.bwd_time;
  }
  return 0.0;
}

// Byte counts round to the nearest byte, saturating at the int64 range; negative values become 0.
inline std::int64_t bytes_from_double(double value) {
  if (!(value > 0.0)) return 0;
  constexpr double kMax = static_cast<double>(std::numeric_limits<std::int64_t>::max());
  if (value >= kMax) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(value + 0.5);
}

// Stores `value` (bytes or seconds, >= 0) as `q` of `costs`.
inline void set_quantity(VariantCosts& costs, Quantity q, double value) {
  switch (q) {
    case Quantity::kOutBytes:
      costs.out_bytes = bytes_from_double(value);
      break;
    case Quantity::kSavedBytes:
      costs.saved_bytes = bytes_from_double(value);
      break;
    case Quantity::kFwdPeak:
      costs.fwd_peak = bytes_from_double(value);
      break;
    case Quantity::kBwdPeak:
      costs.bwd_peak = bytes_from_double(value);
      break;
    case Quantity::kFwdTime:
      costs.fwd_time = value > 0.0 ? value : 0.0;
      break;
    case Quantity::kBwdTime:
      costs.bwd_time = value > 0.0 ? value : 0.0;
      break;
  }
}

}  // namespace monet
