// The online predictor: learns each stage's memory and time as functions of the input's shape
// from a few profiled iterations, and predicts the chain (include/monet/chain.h) for shapes it
// has never run, so that the planner can plan them before they run.
//
//   Predictor p(layout, options);
//   p.observe({32, 128}, measured_chain);            // after each profiling iteration
//   if (p.confidence({16, 200}).confident) plan(p.predict({16, 200}), budget);
//   else if (auto s = p.next_shape_to_profile(seen)) ...  // the shape to profile next
//
// Each quantity of each stage variant gets its own law, a sum of at most max_terms monomials of
// the varying dims (exponents <= 2), chosen by leave-one-out error over the profiled shapes
// (law_search.h); a time is the non-negative sum of the constant, its byte laws' monomials and,
// where a dim is named "batch" and a term is free, a cost per sample, once there are as many
// profiled shapes as those terms (LawSearchOptions::nonnegative_sum). At profiled shapes the
// measurements themselves are returned. docs/predictor.md describes the model, the confidence
// rule and the JSON state.
//
// Not thread-safe: one predictor belongs to one runtime thread.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "monet/chain.h"
#include "predictor/law.h"
#include "predictor/law_search.h"
#include "predictor/monomial_basis.h"
#include "predictor/quantity.h"
#include "predictor/shape_table.h"
#include "predictor/variant_model.h"

namespace monet {

// The names of one stage and of its operator variants; the first variant is the default one.
struct StageLayout {
  std::string name;
  std::vector<std::string> variants = {"default"};
};

struct PredictorOptions {
  // Names of the varying dims ("batch", "seq"), used in messages and laws; optional. A dim named
  // "batch" (any case) is known to hold independent samples: times may then carry a cost per
  // sample, and the shapes to profile are chosen knowing that samples do not interact.
  std::vector<std::string> dim_names;
  // Most monomials in one law (1..4). With n profiled shapes, laws of up to n - 1 terms are tried.
  int max_terms = 3;
  // Largest total degree of a monomial (each dim's exponent is at most 2). 3 admits batch*seq^2
  // and batch*H*W; raise it for laws like batch*(H*W)^2.
  int max_total_degree = 3;
  // Distinct profiled shapes before a prediction at an unprofiled shape can be confident.
  int min_profiled_shapes = 3;
  // A prediction is confident when every number's error bound is within tolerance * value + slack.
  double bytes_tolerance = 0.03;
  double time_tolerance = 0.10;
  double bytes_slack = 64 * 1024;  // bytes: errors this small never matter to a plan
  double time_slack = 20e-6;       // seconds
  // ... nor does a time's error within this share of the step's predicted time (every stage's
  // default forward and backward): a plan's cost is a sum of stage times, so a stage whose time
  // follows no law of the shape (a classifier head of 0.1 ms) need not keep a whole chain from
  // being confident. The larger of the two slacks counts. Default 0.5%.
  double time_share_slack = 0.005;
  // A shape whose dims lie beyond the profiled range by more than this factor (above the largest
  // or below the smallest / factor) is not confident: profiling it widens the range instead.
  double extrapolation_limit = 1.25;
  // Relative noise assumed of measurements when repeated ones do not tell (law_search.h). A time's
  // error bound is never computed from less than time_noise_floor.
  double bytes_noise_floor = 1e-3;
  double time_noise_floor = 0.02;
};

// How far a prediction at one shape can be trusted.
struct Confidence {
  bool confident = false;
  bool measured = false;  // the shape was profiled: its numbers are measurements
  // Largest relative error bound over the byte and time numbers of the chain (0 where measured;
  // infinite where a law is not validated yet).
  double bytes_bound = std::numeric_limits<double>::infinity();
  double time_bound = std::numeric_limits<double>::infinity();
  std::string reason;  // why not confident, for logs; empty when confident
};

// A prediction with, for each number, an absolute error bound in the same units and layout.
struct Prediction {
  Chain chain;
  Chain bounds;  // bytes saturate at INT64_MAX and times are +inf where nothing is validated
};

class Predictor {
 public:
  // Throws ConfigError for bad options and std::invalid_argument for an empty layout, a stage
  // without variants, or repeated variant names within a stage.
  explicit Predictor(std::vector<StageLayout> stages, PredictorOptions options = {});
  // The layout of `chain` (stage and variant names; the numbers are ignored).
  static Predictor for_chain(const Chain& chain, PredictorOptions options = {});

  Predictor(Predictor&&) noexcept;
  Predictor& operator=(Predictor&&) noexcept;
  ~Predictor();

  // Folds one measurement of variant `variant` of stage `stage` at `shape` in and refits its
  // laws. Throws std::invalid_argument, saying what was wrong, for: a stage or variant index out
  // of range; a negative, NaN or infinite number; a shape with a dim <= 0, with more than 4 dims,
  // or with a different number of dims than the shapes seen before.
  void observe(const Shape& shape, int stage, int variant, const VariantCosts& measured);
  // Every stage of `measured` (the same stages as the layout, by name and in order; variants
  // matched by name, any subset of them, each at most once). Checks everything before folding
  // anything in: std::invalid_argument for another number of stages, a stage of another name, an
  // unknown or repeated variant name, no variant in any stage, or a bad shape or number (see
  // above).
  void observe(const Shape& shape, const Chain& measured);
  // Parameters, gradients and optimizer state: bytes that do not depend on the shape.
  void set_fixed_bytes(std::int64_t bytes);
  // What the measurements were taken on besides their shapes, in words that a later job compares
  // with its own ("input float32 on cpu; parameters float32; every parameter trains"): kept in
  // the state, not read by the predictor. Empty (the default): not said.
  void set_measured_on(std::string what) { measured_on_ = std::move(what); }
  const std::string& measured_on() const { return measured_on_; }

  // The chain at `shape`. A stage's default variant is always there; another variant appears once
  // it was profiled at min_profiled_shapes shapes, or at this one. Before any observation every
  // number is 0. Throws std::invalid_argument for a bad shape (see observe).
  Chain predict(const Shape& shape) const;
  // The same, reusing `chain`'s storage: the fast path (no allocation once the layout is there).
  void predict_into(const Shape& shape, Chain* chain) const;
  Prediction predict_with_bounds(const Shape& shape) const;
  Confidence confidence(const Shape& shape) const;
  // The slack a time's error may have beside time_tolerance in a confident prediction `chain`
  // (seconds): the larger of time_slack and time_share_slack of its step time, every stage's
  // default forward and backward.
  double time_slack(const Chain& chain) const;
  // Why `shape` is not covered yet, empty when it is: covered means min_profiled_shapes shapes
  // profiled, each dim within the profiled range widened by extrapolation_limit, and each product
  // of two dims or more within the profiled products' range widened by extrapolation_limit once
  // for each dim in it. The first
  // conditions of confidence(); past them, each number's error bound says how far to trust it.
  // Throws std::invalid_argument for a bad shape (see observe).
  std::string coverage_gap(const Shape& shape) const;

  // Among `candidates` (shapes the job has met), the one to profile next, or nullopt when each is
  // profiled or confidently predicted. First the largest shape, then always the one farthest (in
  // log dims, normalised by their range) from every profiled shape: the extremes of the range
  // first, so that later predictions interpolate. Among equally far shapes, the one under which a
  // stage's time law would extrapolate least to the other candidates (a dim named "batch" enters
  // costs linearly); then the larger error bound. docs/predictor.md has the rules.
  std::optional<Shape> next_shape_to_profile(const std::vector<Shape>& candidates) const;

  int num_stages() const { return static_cast<int>(layout_.size()); }
  const std::vector<StageLayout>& layout() const { return layout_; }
  const PredictorOptions& options() const { return options_; }
  // Dims of the shapes seen; 0 before the first observation.
  int num_dims() const { return basis_ ? basis_->dims() : 0; }
  // Dim `d`'s name in PredictorOptions::dim_names, else "d0", "d1", ...; all of them joined by
  // " x " ("batch x seq"; empty before the first shape).
  std::string dim_name(int d) const;
  std::string describe_dims() const;
  // Distinct shapes profiled (at any stage).
  int profiled_shapes() const { return table_ ? table_->size() : 0; }
  bool is_profiled(const Shape& shape) const { return table_ && table_->find(shape) >= 0; }
  // The shapes measured so far, in the order they were first measured.
  std::vector<Shape> measured_shapes() const;
  // The law fitted for one number, e.g. "1024*batch*seq + 16*batch*seq^2" ("0" before data).
  std::string describe_law(int stage, int variant, Quantity q) const;
  const FittedLaw* law(int stage, int variant, Quantity q) const;

  // The state (layout, options, every profiled shape's statistics, and the laws for people to
  // read) as JSON; docs/predictor.md gives the format. Loading refits the laws from the
  // statistics. from_json and load throw ConfigError naming what is malformed.
  nlohmann::json to_json() const;
  static Predictor from_json(const nlohmann::json& state, const std::string& source = "state");
  // Writes to_json() to `path` (atomically: a temporary file, then a rename). Throws ConfigError
  // when the file cannot be written.
  void save(const std::string& path) const;
  static Predictor load(const std::string& path);
  // Throws ConfigError naming the first difference when `stages` is not this predictor's layout
  // (a warm start from a state saved for another model).
  void check_layout(const std::vector<StageLayout>& stages) const;

 private:
  void check_shape(const Shape& shape, const char* what) const;
  void check_indices(int stage, int variant) const;
  void check_costs(int stage, int variant, const VariantCosts& measured) const;
  // Makes the basis and the shape table at the first observation.
  void start(int dims);
  void refit(int stage, int variant);
  bool variant_included(int stage, int variant, int shape_id) const;
  // Absolute bounds for each number of `chain` predicted at `shape`, and the first number whose
  // bound is outside tolerance (as `reason`) into `confidence` when given.
  void bound_chain(const Shape& shape, const Chain& chain, Chain* bounds,
                   Confidence* confidence) const;

  std::vector<StageLayout> layout_;
  PredictorOptions options_;
  LawSearchOptions bytes_search_;
  LawSearchOptions time_search_;
  std::unique_ptr<MonomialBasis> basis_;  // made at the first observation
  int per_sample_term_ = -1;              // the basis monomial `batch`, or -1 (no dim named so)
  std::unique_ptr<ShapeTable> table_;
  std::unique_ptr<LawSearch> search_;
  std::vector<std::vector<VariantModel>> models_;  // [stage][variant]
  std::int64_t fixed_bytes_ = 0;
  std::string measured_on_;
};

}  // namespace monet
