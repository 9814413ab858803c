// The block form of simulate()'s model: what the dynamic programs plan over.
//
// Cut a plan into blocks: each kept stage is a block, and each segment (a maximal run a..b of
// checkpointed stages) is a block. Let P(B) be what the blocks before block B retain (simulate.h:
// a kept stage i retains o(i-1) + s(i), a segment a..b retains o(a-1)). Walking simulate()'s
// steps block by block gives, exactly (integers, nothing rounded):
//
//   peak = fixed_bytes + max( max over blocks B of P(B) + local(B),  P(all blocks) + 2 o(L) )
//
// where local(B) depends only on the block's own stages and variants, on o(a-1), and on G(i), the
// gradients the backward of stages i..L creates (g(i) + ... + g(L), g = Stage::grad_bytes,
// G(L+1) = 0), which the stages after a block have made before its backward begins:
//   kept stage i:  o(i-1) + s(i) + o(i) + max(f(i), o(i-1) + b(i) + G(i+1))
//   segment a..b:  o(a-1) + max( max over j of [j > a] o(j-1) + o(j) + f(j),   forward
//                                o(b) + G(b+1) + max over j of S(j) + f(j),   recomputation
//                                T(b), o(b) + max over j < b of T(j) )        backward
//                  with j running over a..b, S(j) = sum over k = a..j of s(k) + o(k) and
//                  T(j) = S(j) + o(j-1) + b(j) + G(j+1); dx(b) is held through the backward of
//                  every stage of the segment, and T(b) has it already (in S(b)).
// BlockCosts stores b(j) + G(j+1) as bwd_peak(j, v), and end_held(b) = o(b) + G(b+1), so that
// each term above keeps the form it has without gradients.
// Time is a sum over blocks: fwd_time + bwd_time per kept stage, 2 fwd_time + bwd_time per
// checkpointed stage. So whether a plan fits depends only on the running sum P at each block's
// start, which is what makes CheckpointDp exact. The tests check this identity against simulate()
// on random chains and plans.
//
// Stages are numbered 1..L here, as in simulate.h. o(i) is one number per stage: the default
// variant's out_bytes, or, when planning over every variant, the largest out_bytes among them, so
// that a plan found here never underestimates simulate()'s peak. exact() says whether the two
// agree for every variant a plan may pick.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "monet/chain.h"
#include "monet/planner.h"
#include "planner/chain_model.h"

namespace monet {

class BlockCosts {
 public:
  // A block's numbers, bytes relative to the P of its start.
  struct Block {
    std::int64_t local = 0;     // highest live bytes above fixed_bytes + P during the block
    std::int64_t retained = 0;  // what the block adds to P for the blocks after it
    double time = 0.0;          // seconds
  };

  // `chain` must be valid (validate_chain); its numbers are copied. With `default_only`, plans may
  // use only variant 0 of each stage.
  BlockCosts(const Chain& chain, bool default_only);

  int stages() const { return stages_; }
  std::int64_t fixed_bytes() const { return fixed_bytes_; }
  bool default_only() const { return default_only_; }
  // Whether o(i) is the out_bytes of every variant a plan may use, so that peak() equals
  // simulate()'s peak for every such plan.
  bool exact() const { return exact_; }
  // o(i) for i in 0..L; o(0) = 0.
  std::int64_t out(int i) const { return out_[i]; }
  // The number of variants stage i (1..L) may run: 1 with default_only.
  int variant_count(int i) const { return first_[i + 1] - first_[i]; }
  std::int64_t saved(int i, int v) const { return saved_[first_[i] + v]; }
  std::int64_t fwd_peak(int i, int v) const { return fwd_peak_[first_[i] + v]; }
  // b(i) + G(i+1): the variant's bwd_peak plus the gradients of the stages after i, live during
  // its backward.
  std::int64_t bwd_peak(int i, int v) const { return bwd_peak_[first_[i] + v]; }
  // o(b) + G(b+1): what a segment ending at stage b holds during its recomputation beside its
  // own bytes, dx(b) and the gradients of the stages after b. For b in 0..L.
  std::int64_t end_held(int b) const { return out_[b] + grads_after_[b]; }
  double fwd_time(int i, int v) const { return fwd_time_[first_[i] + v]; }
  double bwd_time(int i, int v) const { return bwd_time_[first_[i] + v]; }

  // Stage i kept, running variant v.
  Block kept(int i, int v) const {
    const std::int64_t in = out_[i - 1];
    const std::int64_t base = in + saved(i, v) + out_[i];
    const std::int64_t extra =
        fwd_peak(i, v) > in + bwd_peak(i, v) ? fwd_peak(i, v) : in + bwd_peak(i, v);
    return Block{base + extra, in + saved(i, v), fwd_time(i, v) + bwd_time(i, v)};
  }
  // The high point of the turn, above fixed_bytes + P(all blocks): 2 o(L).
  std::int64_t turn() const { return 2 * out_[stages_]; }

  // Calls f(first, last, is_segment, block) for every block of `plan` in order: a kept stage
  // (first == last) or a segment first..last, with the variants the plan gives its stages.
  template <typename F>
  void for_each_block(const Plan& plan, F f) const;

  // The block-form peak and time of a whole plan (1 block per kept stage or segment).
  std::int64_t peak(const Plan& plan) const;
  double time(const Plan& plan) const;

 private:
  int stages_;
  std::int64_t fixed_bytes_;
  bool default_only_;
  bool exact_ = true;
  std::vector<std::int64_t> out_;          // L + 1
  std::vector<std::int64_t> grads_after_;  // L + 1: G(i+1) at index i
  std::vector<int> first_;  // L + 2: stage i's variants are [first_[i], first_[i + 1])
  std::vector<std::int64_t> saved_, fwd_peak_, bwd_peak_;
  std::vector<double> fwd_time_, bwd_time_;
};

// A segment a..b grown one stage at a time, with its block numbers after each stage: the
// dynamic programs try every end b for a start a in O(1) per stage.
class SegmentScan {
 public:
  SegmentScan(const BlockCosts& costs, int first)
      : costs_(&costs), first_(first), last_(first - 1), input_(costs.out(first - 1)) {}

  // Appends stage last() + 1, running variant v.
  void extend(int v) {
    const int j = ++last_;
    const std::int64_t in = j > first_ ? costs_->out(j - 1) : 0;
    const std::int64_t fwd = in + costs_->out(j) + costs_->fwd_peak(j, v);
    if (fwd > max_forward_) max_forward_ = fwd;
    sum_ += costs_->saved(j, v) + costs_->out(j);
    const std::int64_t recompute = sum_ + costs_->fwd_peak(j, v);
    if (recompute > max_recompute_) max_recompute_ = recompute;
    // Stage j - 1 is no longer the last: dx of the segment's end is held above its backward too.
    if (j > first_ && last_backward_ > inner_backward_) inner_backward_ = last_backward_;
    last_backward_ = sum_ + costs_->out(j - 1) + costs_->bwd_peak(j, v);
    time_ += 2.0 * costs_->fwd_time(j, v) + costs_->bwd_time(j, v);
  }

  int first() const { return first_; }
  int last() const { return last_; }
  // The block numbers of segment first()..last().
  std::int64_t local() const { return partial_local(last_); }
  // local() of the stages so far, were the segment to end at stage b >= last(): every stage so far
  // then runs its backward below dx(b) (all of them where b > last()). No segment from first() to
  // b that extends the stages so far has a smaller local(): every term only grows as it goes on.
  std::int64_t partial_local(int b) const {
    std::int64_t m = max_forward_;
    const std::int64_t recompute = costs_->end_held(b) + max_recompute_;
    if (recompute > m) m = recompute;
    const std::int64_t backward = b == last_
                                      ? std::max(last_backward_, costs_->out(b) + inner_backward_)
                                      : costs_->out(b) + std::max(inner_backward_, last_backward_);
    return input_ + std::max(m, backward);
  }
  std::int64_t retained() const { return input_; }
  double time() const { return time_; }
  // A bound that grows with last(): no segment from first() to last() or beyond has a smaller
  // local(), so a scan can stop once this is too large.
  std::int64_t local_lower_bound() const { return input_ + sum_; }

 private:
  const BlockCosts* costs_;  // a pointer, so that scans can be copied and assigned
  int first_;
  int last_;
  std::int64_t input_;  // o(first - 1)
  std::int64_t sum_ = 0;
  std::int64_t max_forward_ = 0;
  std::int64_t max_recompute_ = 0;
  std::int64_t inner_backward_ = 0;  // T(j) over stages first..last - 1 (0 for none)
  std::int64_t last_backward_ = 0;   // T(last)
  double time_ = 0.0;
};

template <typename F>
void BlockCosts::for_each_block(const Plan& plan, F f) const {
  for (int i = 1; i <= stages_;) {
    const StagePlan& stage = plan.stages[static_cast<std::size_t>(i - 1)];
    if (!stage.checkpoint) {
      f(i, i, false, kept(i, stage.variant));
      ++i;
      continue;
    }
    SegmentScan scan(*this, i);
    const int first = i;
    const int last = segment_last(plan, i - 1) + 1;
    for (; i <= last; ++i) scan.extend(plan.stages[static_cast<std::size_t>(i - 1)].variant);
    f(first, last, true, Block{scan.local(), scan.retained(), scan.time()});
  }
}

}  // namespace monet
