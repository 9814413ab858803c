// A host backend whose events complete only when the test says so, to exercise the pool's
// cross-stream logic without a GPU.
#pragma once

#include <set>

#include "allocator/host_backend.h"

namespace monet::testing {

// Segments held whole, as cudaMalloc holds them.
inline HostBackend::Options whole_segments(std::size_t capacity = 0, bool backed = true) {
  HostBackend::Options o;
  o.capacity_bytes = capacity;
  o.backed = backed;
  o.granularity = 0;
  return o;
}

class ManualEventBackend : public HostBackend {
 public:
  using HostBackend::HostBackend;

  Event record_event(Stream) override {
    const Event e = next_++;
    open_.insert(e);
    ++recorded_;
    return e;
  }
  bool event_done(Event e) override { return open_.count(e) == 0; }
  void wait_event(Event e) override {
    open_.erase(e);
    ++waited_;
  }
  void destroy_event(Event e) override { ++destroyed_; }

  void complete_all() { open_.clear(); }
  std::size_t open_events() const { return open_.size(); }
  int recorded() const { return recorded_; }
  int waited() const { return waited_; }
  int destroyed() const { return destroyed_; }

 private:
  Event next_ = 1;
  std::set<Event> open_;
  int recorded_ = 0, waited_ = 0, destroyed_ = 0;
};

}  // namespace monet::testing
