#include "predictor/predictor.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "monet/errors.h"
#include "predictor/cholesky.h"

namespace monet {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxMonomials = 81;  // 3^kMaxDims
// next_shape_to_profile: a dim's value is new when it is this far (in log dims scaled to [0, 1])
// from every profiled value, and a shape gains this much per new dim (as a share of all dims).
constexpr double kNewValue = 0.05;
constexpr double kNewValueBonus = 0.5;
// ... and, from the third shape on, shapes whose separation (see there) is below this come last.
constexpr double kMinSeparation = 0.1;
// Shapes whose score is within this of the farthest one's are equally far: among them, the one
// under which the expected time laws extrapolate least to the shapes met is taken.
constexpr double kEquallyFar = 0.05;
// ... and leverages within this factor of the least are the same.
constexpr double kSameLeverage = 1.1;

// The index of the dim named "batch" (any case), or -1.
int batch_dim(const PredictorOptions& o) {
  for (std::size_t d = 0; d < o.dim_names.size(); ++d) {
    std::string name = o.dim_names[d];
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == "batch") return static_cast<int>(d);
  }
  return -1;
}

void check_options(const PredictorOptions& o) {
  auto fail = [](const std::string& what) {
    throw ConfigError("monet predictor options: " + what);
  };
  if (o.max_terms < 1 || o.max_terms > kMaxTerms) {
    fail(fmt::format("max_terms is {}; use 1 to {}", o.max_terms, kMaxTerms));
  }
  if (o.max_total_degree < 1 || o.max_total_degree > 2 * kMaxDims) {
    fail(fmt::format("max_total_degree is {}; use 1 to {}", o.max_total_degree, 2 * kMaxDims));
  }
  if (o.min_profiled_shapes < 1) {
    fail(fmt::format("min_profiled_shapes is {}; use 1 or more (3 is the default)",
                     o.min_profiled_shapes));
  }
  if (static_cast<int>(o.dim_names.size()) > kMaxDims) {
    fail(fmt::format("{} dim names given; at most {} dims may vary", o.dim_names.size(), kMaxDims));
  }
  auto positive = [&](double v, const char* name) {
    if (!(v >= 0.0) || !std::isfinite(v)) {
      fail(fmt::format("{} is {}; use a finite number >= 0", name, v));
    }
  };
  positive(o.bytes_tolerance, "bytes_tolerance");
  positive(o.time_tolerance, "time_tolerance");
  positive(o.bytes_slack, "bytes_slack");
  positive(o.time_slack, "time_slack");
  positive(o.time_share_slack, "time_share_slack");
  positive(o.bytes_noise_floor, "bytes_noise_floor");
  positive(o.time_noise_floor, "time_noise_floor");
  if (!(o.extrapolation_limit >= 1.0) || !std::isfinite(o.extrapolation_limit)) {
    fail(fmt::format("extrapolation_limit is {}; use a factor >= 1 (1.25 is the default)",
                     o.extrapolation_limit));
  }
}

// The index in `basis` of the monomial with these exponents, or -1.
int monomial_index(const MonomialBasis& basis, const std::array<int, kMaxDims>& exponents) {
  for (int m = 0; m < basis.size(); ++m) {
    bool same = true;
    for (int d = 0; d < basis.dims(); ++d) same &= basis.exponents(m)[d] == exponents[d];
    if (same) return m;
  }
  return -1;
}

// The three-term byte laws a stage is expected to follow: a constant (weights, workspaces), P, the
// product of the dims (activations), and P times one dim other than the batch (an attention
// matrix, batch*seq^2; samples do not interact). The same laws next_shape_to_profile expects.
std::vector<std::vector<int>> expected_byte_laws(const MonomialBasis& basis, int batch) {
  std::array<int, kMaxDims> exponents{};
  const int constant = monomial_index(basis, exponents);
  for (int d = 0; d < basis.dims(); ++d) exponents[d] = 1;
  const int product = monomial_index(basis, exponents);
  std::vector<std::vector<int>> laws;
  if (constant < 0 || product < 0) return laws;
  for (int d = 0; d < basis.dims(); ++d) {
    if (d == batch) continue;
    std::array<int, kMaxDims> squared = exponents;
    squared[d] = 2;
    const int attention = monomial_index(basis, squared);  // beyond max_total_degree: -1
    if (attention >= 0) laws.push_back({constant, product, attention});
  }
  return laws;
}

}  // namespace

Predictor::Predictor(std::vector<StageLayout> stages, PredictorOptions options)
    : layout_(std::move(stages)), options_(std::move(options)) {
  check_options(options_);
  if (layout_.empty()) {
    throw std::invalid_argument(
        "monet predictor: the layout has no stages; give one StageLayout per stage of the chain");
  }
  // The planner refuses a chain whose stage or variant names are empty or repeat
  // (validate_chain): the predictor's chains would name them so, so its layout may not either.
  std::set<std::string> stage_names;
  for (std::size_t i = 0; i < layout_.size(); ++i) {
    const StageLayout& s = layout_[i];
    if (s.name.empty() || !stage_names.insert(s.name).second) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage {} {}; give every stage a name of its own", i,
          s.name.empty() ? "has no name" : fmt::format("repeats the name '{}'", s.name)));
    }
    if (std::find(s.variants.begin(), s.variants.end(), std::string()) != s.variants.end()) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage '{}' (index {}) has a variant without a name", s.name, i));
    }
    if (s.variants.empty()) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage '{}' (index {}) has no variants; give at least its default "
          "implementation",
          s.name, i));
    }
    std::set<std::string> names(s.variants.begin(), s.variants.end());
    if (names.size() != s.variants.size()) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage '{}' (index {}) names a variant twice; variant names must be "
          "unique within a stage",
          s.name, i));
    }
  }
  bytes_search_.max_terms = options_.max_terms;
  bytes_search_.noise_floor = options_.bytes_noise_floor;
  bytes_search_.negligible = options_.bytes_slack;
  // A byte law that misses a shape left out by more than half its value does not describe that
  // shape: the bytes it missed by bound its error everywhere (a plan made on bytes too low runs out
  // of memory). Times only rank plans, and their misses are the machine's noise as often.
  bytes_search_.miss_share = 0.5;
  time_search_.max_terms = options_.max_terms;
  time_search_.noise_floor = options_.time_noise_floor;
  models_.resize(layout_.size());
  for (std::size_t i = 0; i < layout_.size(); ++i) models_[i].resize(layout_[i].variants.size());
}

Predictor Predictor::for_chain(const Chain& chain, PredictorOptions options) {
  std::vector<StageLayout> stages;
  stages.reserve(chain.stages.size());
  for (const Stage& s : chain.stages) {
    StageLayout l{s.name, {}};
    for (const VariantCosts& v : s.variants) l.variants.push_back(v.name);
    stages.push_back(std::move(l));
  }
  return Predictor(std::move(stages), std::move(options));
}

Predictor::Predictor(Predictor&&) noexcept = default;
Predictor& Predictor::operator=(Predictor&&) noexcept = default;
Predictor::~Predictor() = default;

void Predictor::check_shape(const Shape& shape, const char* what) const {
  const int dims = static_cast<int>(shape.size());
  if (num_dims() != 0 && dims != num_dims()) {
    const std::string names = describe_dims();
    throw std::invalid_argument(fmt::format(
        "monet predictor: {} shape {} has {} dims, but the shapes seen so far have {} ({}); "
        "give every shape the same varying dims in the same order",
        what, format_shape(shape), dims, num_dims(), names));
  }
  if (dims < 1 || dims > kMaxDims) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: {} shape {} has {} dims; between 1 and {} are supported: give only the "
        "dims that vary between iterations (batch, sequence, height, width)",
        what, format_shape(shape), dims, kMaxDims));
  }
  for (int d = 0; d < dims; ++d) {
    if (shape[d] <= 0) {
      throw std::invalid_argument(
          fmt::format("monet predictor: {} shape {} has {} = {}; every dim must be > 0", what,
                      format_shape(shape), dim_name(d), shape[d]));
    }
  }
}

void Predictor::check_indices(int stage, int variant) const {
  if (stage < 0 || stage >= num_stages()) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: stage index {} is out of range; the chain has {} stages (0 to {})", stage,
        num_stages(), num_stages() - 1));
  }
  const int variants = static_cast<int>(layout_[stage].variants.size());
  if (variant < 0 || variant >= variants) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: variant index {} of stage '{}' is out of range; it has {} variants",
        variant, layout_[stage].name, variants));
  }
}

void Predictor::check_costs(int stage, int variant, const VariantCosts& measured) const {
  for (Quantity q : kAllQuantities) {
    const double v = quantity_value(measured, q);
    if (!is_bytes(q) && v > kMaxChainSeconds) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage '{}' (index {}), variant '{}': {} = {} s is more than a stage "
          "can take ({} s, about 32 years): check what measured it",
          layout_[stage].name, stage, layout_[stage].variants[variant], quantity_name(q), v,
          kMaxChainSeconds));
    }
    if (is_bytes(q) && v > static_cast<double>(kMaxChainBytes)) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage '{}' (index {}), variant '{}': {} = {} bytes is more than a "
          "stage can hold ({} bytes, 1 PiB): check what measured it",
          layout_[stage].name, stage, layout_[stage].variants[variant], quantity_name(q), v,
          kMaxChainBytes));
    }
    if (std::isfinite(v) && v >= 0.0) continue;
    throw std::invalid_argument(fmt::format(
        "monet predictor: stage '{}' (index {}), variant '{}': {} = {} is not a measurement; "
        "bytes and seconds must be finite and >= 0: check what measured it",
        layout_[stage].name, stage, layout_[stage].variants[variant], quantity_name(q), v));
  }
}

void Predictor::start(int dims) {
  basis_ = std::make_unique<MonomialBasis>(dims, std::min(options_.max_total_degree, 2 * dims));
  per_sample_term_ = -1;
  if (const int batch = batch_dim(options_); batch >= 0 && batch < dims) {
    for (int m = 0; m < basis_->size(); ++m) {
      if (basis_->total_degree(m) == 1 && basis_->exponents(m)[batch] == 1) per_sample_term_ = m;
    }
  }
  bytes_search_.expected_laws = expected_byte_laws(*basis_, batch_dim(options_));
  table_ = std::make_unique<ShapeTable>(basis_.get());
  search_ = std::make_unique<LawSearch>(basis_.get());
}

void Predictor::observe(const Shape& shape, int stage, int variant, const VariantCosts& measured) {
  check_indices(stage, variant);
  check_shape(shape, "measured");
  check_costs(stage, variant, measured);
  if (!basis_) start(static_cast<int>(shape.size()));
  const int id = table_->add(shape);
  std::array<double, kNumQuantities> values;
  for (Quantity q : kAllQuantities) values[static_cast<int>(q)] = quantity_value(measured, q);
  models_[stage][variant].observe(id, values);
  refit(stage, variant);
}

void Predictor::observe(const Shape& shape, const Chain& measured) {
  if (static_cast<int>(measured.stages.size()) != num_stages()) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: the measured chain has {} stages but the layout has {}; measure every "
        "stage of the chain the predictor was made for",
        measured.stages.size(), num_stages()));
  }
  check_shape(shape, "measured");
  // Resolve and check everything first, so that a bad number leaves the state as it was.
  std::vector<std::vector<int>> variant_of(measured.stages.size());
  for (int i = 0; i < num_stages(); ++i) {
    // Stages are matched by position: one of another name is another model's (or this one's
    // stages in another order), whose numbers would be learnt as this stage's.
    if (measured.stages[i].name != layout_[i].name) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: stage {} of the measured chain is '{}' but the layout's stage {} is "
          "'{}'; measure the stages of the chain the predictor was made for, in its order",
          i, measured.stages[i].name, i, layout_[i].name));
    }
    const std::vector<std::string>& names = layout_[i].variants;
    for (const VariantCosts& v : measured.stages[i].variants) {
      auto it = std::find(names.begin(), names.end(), v.name);
      if (it == names.end()) {
        throw std::invalid_argument(fmt::format(
            "monet predictor: stage '{}' (index {}) has no variant '{}' in the layout; its "
            "variants are: {}",
            layout_[i].name, i, v.name, fmt::join(names, ", ")));
      }
      const int variant = static_cast<int>(it - names.begin());
      // One measurement a variant and step: a variant listed twice would count twice.
      if (std::find(variant_of[i].begin(), variant_of[i].end(), variant) != variant_of[i].end()) {
        throw std::invalid_argument(fmt::format(
            "monet predictor: stage '{}' (index {}) of the measured chain lists variant '{}' "
            "twice; give each variant's measurement once",
            layout_[i].name, i, v.name));
      }
      check_costs(i, variant, v);
      variant_of[i].push_back(variant);
    }
  }
  // A chain that measures nothing would still make its shape profiled: counted towards
  // min_profiled_shapes, widening the profiled range, and never asked for again.
  if (std::all_of(variant_of.begin(), variant_of.end(), [](const auto& v) { return v.empty(); })) {
    throw std::invalid_argument(fmt::format(
        "monet predictor: the measured chain at shape {} has no variant in any stage; give the "
        "measurements of at least one variant",
        format_shape(shape)));
  }
  if (!basis_) start(static_cast<int>(shape.size()));
  const int id = table_->add(shape);
  for (int i = 0; i < num_stages(); ++i) {
    for (std::size_t k = 0; k < variant_of[i].size(); ++k) {
      std::array<double, kNumQuantities> values;
      for (Quantity q : kAllQuantities) {
        values[static_cast<int>(q)] = quantity_value(measured.stages[i].variants[k], q);
      }
      models_[i][variant_of[i][k]].observe(id, values);
      refit(i, variant_of[i][k]);
    }
  }
}

void Predictor::set_fixed_bytes(std::int64_t bytes) {
  if (bytes < 0) {
    throw std::invalid_argument(
        fmt::format("monet predictor: fixed_bytes = {} is negative; give the bytes of parameters, "
                    "gradients and optimizer state (>= 0)",
                    bytes));
  }
  fixed_bytes_ = bytes;
}

void Predictor::refit(int stage, int variant) {
  models_[stage][variant].refit(*table_, *search_, bytes_search_, time_search_, per_sample_term_);
}

bool Predictor::variant_included(int stage, int variant, int shape_id) const {
  if (variant == 0) return true;
  const VariantModel& m = models_[stage][variant];
  return m.measured(shape_id) || m.measured_shapes() >= options_.min_profiled_shapes;
}

Chain Predictor::predict(const Shape& shape) const {
  Chain chain;
  predict_into(shape, &chain);
  return chain;
}

void Predictor::predict_into(const Shape& shape, Chain* chain) const {
  check_shape(shape, "predicted");
  double monomials[kMaxMonomials];
  int id = -1;
  if (basis_) {
    basis_->evaluate(shape.data(), monomials);
    id = table_->find(shape);
  }
  chain->fixed_bytes = fixed_bytes_;
  chain->stages.resize(layout_.size());
  for (int i = 0; i < num_stages(); ++i) {
    const StageLayout& layout = layout_[i];
    Stage& stage = chain->stages[i];
    if (stage.name != layout.name) stage.name = layout.name;
    const int variants = static_cast<int>(layout.variants.size());
    int k = 0;
    for (int v = 0; v < variants; ++v) {
      if (!variant_included(i, v, id)) continue;
      if (static_cast<int>(stage.variants.size()) <= k) stage.variants.emplace_back();
      VariantCosts& out = stage.variants[k++];
      if (out.name != layout.variants[v]) out.name = layout.variants[v];
      if (basis_) {
        models_[i][v].predict(id, monomials, &out);
      } else {
        out = VariantCosts{layout.variants[v]};
      }
    }
    stage.variants.resize(k);
  }
}

double Predictor::time_slack(const Chain& chain) const {
  double step_time = 0.0;
  for (const Stage& stage : chain.stages) {
    if (!stage.variants.empty()) {
      step_time += stage.variants[0].fwd_time + stage.variants[0].bwd_time;
    }
  }
  return std::max(options_.time_slack, options_.time_share_slack * std::abs(step_time));
}

void Predictor::bound_chain(const Shape& shape, const Chain& chain, Chain* bounds,
                            Confidence* confidence) const {
  double monomials[kMaxMonomials];
  int id = -1;
  if (basis_) {
    basis_->evaluate(shape.data(), monomials);
    id = table_->find(shape);
  }
  if (bounds) *bounds = chain;
  const double time_slack = this->time_slack(chain);
  double worst[2] = {0.0, 0.0};  // bytes, time
  bool all_measured = basis_ != nullptr;
  std::string reason;
  for (int i = 0; i < num_stages(); ++i) {
    const StageLayout& layout = layout_[i];
    int k = 0;
    for (int v = 0; v < static_cast<int>(layout.variants.size()); ++v) {
      if (!variant_included(i, v, id)) continue;
      const int slot = k++;
      const VariantModel* model = basis_ ? &models_[i][v] : nullptr;
      if (!model || !model->measured(id)) all_measured = false;
      for (Quantity q : kAllQuantities) {
        // What the chain holds: the measurement, or the law's value, of which a negative one
        // becomes 0. The bound is the law's at its own value, infinite where that is not above 0.
        const double y = quantity_value(chain.stages[i].variants[slot], q);
        double bound = kInf;
        if (model) {
          bound = model->bound(q, id, monomials,
                               model->measured(id) ? y : model->law(q).law.value(monomials));
        }
        if (bounds) {
          VariantCosts& b = bounds->stages[i].variants[slot];
          set_quantity(b, q, bound);
          if (!is_bytes(q) && bound == kInf) {
            (q == Quantity::kFwdTime ? b.fwd_time : b.bwd_time) = kInf;
          }
        }
        const bool bytes = is_bytes(q);
        const double tolerance = bytes ? options_.bytes_tolerance : options_.time_tolerance;
        const double slack = bytes ? options_.bytes_slack : time_slack;
        const double magnitude = std::max(std::abs(y), 1e-300);
        double& w = worst[bytes ? 0 : 1];
        // Numbers under the slack do not decide the worst relative bound either.
        if (bound == kInf || std::abs(y) > slack) w = std::max(w, bound / magnitude);
        if (reason.empty() && !(bound <= tolerance * std::abs(y) + slack)) {
          const FittedLaw* law = model ? &model->law(q) : nullptr;
          reason = fmt::format(
              "stage '{}' variant '{}' {}: predicted {:.4g} with error bound {} (law {}, fitted on "
              "{} shapes)",
              layout.name, layout.variants[v], quantity_name(q), y,
              bound == kInf ? std::string("unknown") : fmt::format("{:.3g}", bound),
              law ? law->law.describe(*basis_, options_.dim_names) : "none", law ? law->points : 0);
        }
      }
    }
  }
  if (!confidence) return;
  confidence->bytes_bound = worst[0];
  confidence->time_bound = worst[1];
  confidence->measured = all_measured;
  if (all_measured) {
    confidence->confident = true;
    return;
  }
  if (std::string gap = coverage_gap(shape); !gap.empty()) {
    confidence->reason = std::move(gap);
    return;
  }
  confidence->reason = reason;
  confidence->confident = reason.empty();
}

std::string Predictor::coverage_gap(const Shape& shape) const {
  check_shape(shape, "coverage_gap");
  if (!basis_) return "nothing profiled yet";
  if (profiled_shapes() < options_.min_profiled_shapes) {
    return fmt::format("{} of the {} shapes needed are profiled", profiled_shapes(),
                       options_.min_profiled_shapes);
  }
  for (int d = 0; d < num_dims(); ++d) {
    const double lo = static_cast<double>(table_->min_dim(d)) / options_.extrapolation_limit;
    const double hi = static_cast<double>(table_->max_dim(d)) * options_.extrapolation_limit;
    const double x = static_cast<double>(shape[d]);
    if (x < lo || x > hi) {
      return fmt::format("{} = {} is outside the profiled range [{}, {}] by more than a factor {}",
                         dim_name(d), shape[d], table_->min_dim(d), table_->max_dim(d),
                         options_.extrapolation_limit);
    }
  }
  // The products of two dims or more too (batch*seq, H*W, batch*H*W), by the factor once for each
  // dim in them: a law's mixed terms follow them, and a shape within every dim's range may lie far
  // past the profiled products (9 x 86 after 12 x 23, 8 x 35 and 1 x 119: 774 against at most
  // 280), where a law fitted on three shapes extrapolates.
  const int dims = num_dims();
  for (unsigned subset = 1; subset < (1u << dims); ++subset) {
    if ((subset & (subset - 1)) == 0) continue;  // one dim: above
    const auto product = [&](const Shape& s) {
      double v = 1.0;
      for (int d = 0; d < dims; ++d) {
        if (subset & (1u << d)) v *= static_cast<double>(s[d]);
      }
      return v;
    };
    double lo = std::numeric_limits<double>::infinity(), hi = 0.0, factor = 1.0;
    for (int i = 0; i < table_->size(); ++i) {
      lo = std::min(lo, product(table_->shape(i)));
      hi = std::max(hi, product(table_->shape(i)));
    }
    std::string name;
    for (int d = 0; d < dims; ++d) {
      if ((subset & (1u << d)) == 0) continue;
      name += (name.empty() ? "" : "*") + dim_name(d);
      factor *= options_.extrapolation_limit;
    }
    const double x = product(shape);
    if (x < lo / factor || x > hi * factor) {
      return fmt::format(
          "{} = {:.0f} is outside the profiled range [{:.0f}, {:.0f}] by more than a "
          "factor {:g}",
          name, x, lo, hi, factor);
    }
  }
  return {};
}

Prediction Predictor::predict_with_bounds(const Shape& shape) const {
  Prediction p;
  predict_into(shape, &p.chain);
  bound_chain(shape, p.chain, &p.bounds, nullptr);
  return p;
}

Confidence Predictor::confidence(const Shape& shape) const {
  Chain chain;
  predict_into(shape, &chain);
  Confidence c;
  bound_chain(shape, chain, nullptr, &c);
  return c;
}

std::optional<Shape> Predictor::next_shape_to_profile(const std::vector<Shape>& candidates) const {
  std::vector<const Shape*> open;
  for (const Shape& s : candidates) {
    check_shape(s, "candidate");
    if (num_dims() == 0 && !open.empty() && s.size() != open.front()->size()) {
      throw std::invalid_argument(fmt::format(
          "monet predictor: candidate shapes {} and {} have different numbers of dims; give "
          "every shape the same varying dims in the same order",
          format_shape(*open.front()), format_shape(s)));
    }
    if (is_profiled(s)) continue;
    if (profiled_shapes() >= options_.min_profiled_shapes && confidence(s).confident) continue;
    open.push_back(&s);
  }
  if (open.empty()) return std::nullopt;

  auto log_size = [](const Shape& s) {
    double v = 0.0;
    for (std::int64_t d : s) v += std::log(static_cast<double>(d));
    return v;
  };
  if (profiled_shapes() == 0) {
    // The largest first: it bounds the range and holds the peak the budget must fit.
    return **std::max_element(open.begin(), open.end(), [&](const Shape* a, const Shape* b) {
      return log_size(*a) < log_size(*b);
    });
  }

  // Coordinates: log of each dim, scaled so that the range of candidates and profiled shapes is
  // [0, 1] in every dim (a dim that spans 4x weighs as much as one that spans 16x).
  const int dims = num_dims();
  double lo[kMaxDims], span[kMaxDims];
  for (int d = 0; d < dims; ++d) {
    double a = std::log(static_cast<double>(table_->min_dim(d)));
    double b = std::log(static_cast<double>(table_->max_dim(d)));
    for (const Shape* s : open) {
      a = std::min(a, std::log(static_cast<double>((*s)[d])));
      b = std::max(b, std::log(static_cast<double>((*s)[d])));
    }
    lo[d] = a;
    span[d] = b - a;
  }
  auto coordinate = [&](const Shape& s, int d) {
    return span[d] > 0.0 ? (std::log(static_cast<double>(s[d])) - lo[d]) / span[d] : 0.0;
  };
  // Distance to the nearest profiled shape, plus a bonus for each dim in which the shape brings a
  // value not profiled yet: three values of a dim are what tells x from x^2 in it (two corners
  // and a third corner give only two), and the bonus keeps the third shape off the diagonal of
  // the first two, which could not tell one dim from another.
  auto score = [&](const Shape& s) {
    double nearest = kInf;
    int new_dims = 0;
    for (int d = 0; d < dims; ++d) {
      double closest = kInf;
      for (int id = 0; id < table_->size(); ++id) {
        closest = std::min(closest, std::abs(coordinate(s, d) - coordinate(table_->shape(id), d)));
      }
      new_dims += closest > kNewValue;
    }
    for (int id = 0; id < table_->size(); ++id) {
      double sum = 0.0;
      for (int d = 0; d < dims; ++d) {
        const double diff = coordinate(s, d) - coordinate(table_->shape(id), d);
        sum += diff * diff;
      }
      nearest = std::min(nearest, sum);
    }
    return std::sqrt(nearest) + kNewValueBonus * new_dims / dims;
  };
  auto uncertainty = [&](const Shape& s) {
    const Confidence c = confidence(s);
    return std::max(c.bytes_bound / std::max(options_.bytes_tolerance, 1e-12),
                    c.time_bound / std::max(options_.time_tolerance, 1e-12));
  };

  // How well the profiled shapes plus `s` tell apart every two monomials: for each difference of
  // exponent vectors delta (entries -2..2), the spread of delta . coordinates over the shapes; 0
  // means two laws (say batch*H and batch*W when H = W in every shape) agree on all of them.
  std::vector<std::array<int, kMaxDims>> deltas;
  {
    std::array<int, kMaxDims> delta{};
    int count = 1;
    for (int d = 0; d < dims; ++d) count *= 5;
    for (int code = 1; code < count; ++code) {
      int rest = code, first = 0;
      for (int d = 0; d < dims; ++d) {
        delta[d] = rest % 5 - 2;
        rest /= 5;
        if (first == 0) first = delta[d];
      }
      if (first > 0) deltas.push_back(delta);  // one of each +-delta pair
    }
  }
  auto separation = [&](const Shape& s) {
    double worst = kInf;
    for (const auto& delta : deltas) {
      auto project = [&](const Shape& x) {
        double v = 0.0;
        for (int d = 0; d < dims; ++d) v += delta[d] * coordinate(x, d);
        return v;
      };
      double lo = project(s), hi = lo;
      for (int id = 0; id < table_->size(); ++id) {
        const double v = project(table_->shape(id));
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      worst = std::min(worst, hi - lo);
    }
    return worst;
  };
  // From the third shape on, shapes that leave no two monomials confused come first.
  const bool gate = table_->size() >= 2;
  std::vector<double> dist(open.size());
  std::vector<char> separates(open.size(), 1);
  bool any_separates = false;
  for (std::size_t i = 0; i < open.size(); ++i) {
    if (gate) separates[i] = separation(*open[i]) >= kMinSeparation;
    any_separates |= separates[i] != 0;
  }
  double farthest = -1.0;
  for (std::size_t i = 0; i < open.size(); ++i) {
    if (any_separates && !separates[i]) continue;
    dist[i] = score(*open[i]);
    farthest = std::max(farthest, dist[i]);
  }

  // Among equally far shapes, the one under which a stage's time would extrapolate least: times
  // take a constant plus the monomials of the stage's byte laws (step 4 of the model), and those
  // are expected to be P, the product of the dims (activations), and P times one dim other than
  // the batch (an attention matrix, batch*seq^2; never batch^2*seq, since samples do not
  // interact). For each such law c + k*P (+ k'*P*d) with no more terms than shapes, the relative
  // leverage (the variance of a prediction relative to the measurements', rows divided by the
  // value, each term weighing 1 at the middle of the range) at the worst shape met; the law
  // whose worst is largest decides. On the transformer of docs/predictor.md, of the third shapes
  // [4, 64] and [8, 32], which the distance cannot tell apart, this takes [8, 32], under which the
  // worst stage time of 1 ms or more misses by 7% to 17% instead of 14% to 25% (seven runs).
  const int batch = batch_dim(options_);
  std::vector<std::array<int, kMaxDims>> products;  // P, then P*d for each d allowed
  {
    std::array<int, kMaxDims> p{};
    for (int d = 0; d < dims; ++d) p[d] = 1;
    products.push_back(p);
    for (int d = 0; d < dims; ++d) {
      if (d == batch || dims + 1 > options_.max_total_degree) continue;
      std::array<int, kMaxDims> pd = p;
      pd[d] = 2;
      products.push_back(pd);
    }
  }
  double middle[kMaxDims];
  for (int d = 0; d < dims; ++d) middle[d] = lo[d] + 0.5 * span[d];
  auto design_leverage = [&](const Shape& s) {  // s: one of `open`
    double worst = 0.0;
    for (std::size_t extra = 0; extra < products.size(); ++extra) {
      // Terms: 1, P and (extra > 0) products[extra], each divided by its value at the middle.
      const int p = extra == 0 ? 2 : 3;
      if (p > table_->size() + 1) continue;
      auto row = [&](const Shape& x, double* r) {
        double sum = 1.0;
        r[0] = 1.0;
        for (int j = 1; j < p; ++j) {
          const auto& e = products[j == 1 ? 0 : extra];
          double log_value = 0.0;
          for (int d = 0; d < dims; ++d) {
            log_value += e[d] * (std::log(static_cast<double>(x[d])) - middle[d]);
          }
          r[j] = std::exp(log_value);
          sum += r[j];
        }
        for (int j = 0; j < p; ++j) r[j] /= sum;
      };
      double gram[9] = {};
      double r[3];
      auto add = [&](const Shape& x) {
        row(x, r);
        for (int a = 0; a < p; ++a) {
          for (int b = 0; b < p; ++b) gram[a * p + b] += r[a] * r[b];
        }
      };
      for (int id = 0; id < table_->size(); ++id) add(table_->shape(id));
      add(s);
      if (!cholesky(p, gram)) return kInf;
      for (const Shape* x : open) {
        if (x == &s) continue;
        row(*x, r);
        forward_substitute(p, gram, r);
        double h = 0.0;
        for (int j = 0; j < p; ++j) h += r[j] * r[j];
        worst = std::max(worst, h);
      }
    }
    return worst;
  };

  // Leverages within kSameLeverage of the least are the same; among those shapes, the larger
  // error bound, then the larger shape.
  auto equally_far = [&](std::size_t i) {
    return (!any_separates || separates[i]) && dist[i] >= farthest - kEquallyFar;
  };
  std::vector<double> leverage(open.size(), kInf);
  double least = kInf;
  for (std::size_t i = 0; i < open.size(); ++i) {
    if (!equally_far(i)) continue;
    leverage[i] = design_leverage(*open[i]);
    least = std::min(least, leverage[i]);
  }
  const Shape* best = nullptr;
  double best_uncertainty = 0.0;
  for (std::size_t i = 0; i < open.size(); ++i) {
    if (!equally_far(i) || leverage[i] > least * kSameLeverage) continue;
    const double u = uncertainty(*open[i]);
    if (best == nullptr || u > best_uncertainty * (1.0 + 1e-9) ||
        (u >= best_uncertainty / (1.0 + 1e-9) && log_size(*open[i]) > log_size(*best))) {
      best = open[i];
      best_uncertainty = u;
    }
  }
  return *best;
}

const FittedLaw* Predictor::law(int stage, int variant, Quantity q) const {
  check_indices(stage, variant);
  return basis_ ? &models_[stage][variant].law(q) : nullptr;
}

std::string Predictor::dim_name(int d) const {
  return d < static_cast<int>(options_.dim_names.size()) ? options_.dim_names[d]
                                                         : fmt::format("d{}", d);
}

std::string Predictor::describe_dims() const {
  std::string names;
  for (int d = 0; d < num_dims(); ++d) names += (d ? " x " : "") + dim_name(d);
  return names;
}

std::vector<Shape> Predictor::measured_shapes() const {
  std::vector<Shape> shapes;
  for (int id = 0; table_ && id < table_->size(); ++id) shapes.push_back(table_->shape(id));
  return shapes;
}

std::string Predictor::describe_law(int stage, int variant, Quantity q) const {
  const FittedLaw* l = law(stage, variant, q);
  return l ? l->law.describe(*basis_, options_.dim_names) : "0";
}

}  // namespace monet
