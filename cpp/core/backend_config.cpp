#include <sstream>

#include "splat/config.h"
#include "splat/errors.h"

namespace splat {
namespace {

// How each field is read and written as a value index; order matches
// BackendConfig::fields().
struct Accessor {
  int (*get)(const BackendConfig&);
  void (*set)(BackendConfig&, int);
};

#define SPLAT_ACCESSOR(member, type)                                        \
  Accessor {                                                               \
    [](const BackendConfig& c) { return static_cast<int>(c.member); },     \
        [](BackendConfig& c, int v) { c.member = static_cast<type>(v); } \
  }

const std::vector<Accessor>& accessors() {
  static const std::vector<Accessor> table = {
      SPLAT_ACCESSOR(backend, Backend),
      SPLAT_ACCESSOR(raster_backward, RasterBackward),
      SPLAT_ACCESSOR(raster_backward_range, RasterBackwardRange),
      SPLAT_ACCESSOR(raster_backward_sparse, RasterBackwardSparse),
      SPLAT_ACCESSOR(raster_backward_atomic, RasterBackwardAtomic),
      SPLAT_ACCESSOR(radix_sort, RadixSort),
      SPLAT_ACCESSOR(submission, Submission),
      SPLAT_ACCESSOR(forward_submission, ForwardSubmission),
      SPLAT_ACCESSOR(pipelining, Pipelining),
      SPLAT_ACCESSOR(binning, Binning),
      SPLAT_ACCESSOR(pair_sizing, PairSizing),
      SPLAT_ACCESSOR(raster_forward_chunks, RasterForwardChunks),
      SPLAT_ACCESSOR(kernel_overlap, KernelOverlap),
      SPLAT_ACCESSOR(view_launches, ViewLaunches),
      SPLAT_ACCESSOR(deterministic, bool),
      SPLAT_ACCESSOR(timing, Timing),
      SPLAT_ACCESSOR(profile, bool),
  };
  return table;
}
#undef SPLAT_ACCESSOR

int field_index(const std::string& field) {
  const auto& fs = BackendConfig::fields();
  for (size_t i = 0; i < fs.size(); ++i)
    if (field == fs[i].name) return static_cast<int>(i);
  std::ostringstream msg;
  msg << "[BackendConfig] unknown field '" << field << "'; accepted fields:";
  for (const auto& f : fs) msg << ' ' << f.name;
  throw ConfigError(msg.str());
}

std::string join_values(const BackendConfig::Field& f) {
  std::string out;
  for (const char* v : f.values) {
    if (!out.empty()) out += ", ";
    out += v;
  }
  return out;
}

}  // namespace

const std::vector<BackendConfig::Field>& BackendConfig::fields() {
  static const std::vector<Field> table = {
      {"backend", {"auto", "metal", "cuda", "cpu"}, false},
      {"raster_backward", {"simd", "tg", "original"}, false},
      {"raster_backward_range", {"last_contributor", "full_range"}, false},
      {"raster_backward_sparse", {"warp_any", "off"}, false},
      {"raster_backward_atomic", {"spread_lanes", "lane_zero"}, false},
      {"radix_sort", {"portable", "native"}, false},
      {"submission", {"chained", "per_kernel"}, false},
      {"forward_submission", {"chained", "per_stage"}, false},
      {"pipelining", {"off", "on"}, false},
      {"binning", {"resident", "per_iter_alloc"}, false},
      {"pair_sizing", {"device", "readback"}, false},
      {"raster_forward_chunks", {"auto", "all", "skip_saturated"}, false},
      {"kernel_overlap", {"auto", "off", "programmatic"}, false},
      {"view_launches", {"together", "per_view"}, false},
      {"deterministic", {"false", "true"}, true},
      {"timing", {"off", "per_kernel"}, false},
      {"profile", {"false", "true"}, true},
  };
  return table;
}

std::string BackendConfig::get(const std::string& field) const {
  int i = field_index(field);
  return fields()[i].values[accessors()[i].get(*this)];
}

void BackendConfig::set(const std::string& field, const std::string& value) {
  int i = field_index(field);
  const Field& f = fields()[i];
  for (size_t v = 0; v < f.values.size(); ++v) {
    if (value == f.values[v]) {
      accessors()[i].set(*this, static_cast<int>(v));
      return;
    }
  }
  throw ConfigError("[BackendConfig] " + field + ": invalid value '" + value +
                    "'; accepted values: " + join_values(f));
}

std::vector<std::pair<std::string, std::string>> BackendConfig::items() const {
  std::vector<std::pair<std::string, std::string>> out;
  const auto& fs = fields();
  for (size_t i = 0; i < fs.size(); ++i)
    out.emplace_back(fs[i].name, fs[i].values[accessors()[i].get(*this)]);
  return out;
}

std::string BackendConfig::repr() const {
  std::string out = "BackendConfig(";
  bool first = true;
  for (const auto& [k, v] : items()) {
    if (!first) out += ", ";
    first = false;
    out += k + "=" + v;
  }
  return out + ")";
}

const char* backend_name(Backend b) { return BackendConfig::fields()[0].values[static_cast<int>(b)]; }

Backend parse_backend(const std::string& name) {
  BackendConfig c;
  c.set("backend", name);
  return c.backend;
}

std::vector<std::string> BackendConfig::validate(Backend target) const {
  std::vector<std::string> warnings;
  const BackendConfig defaults;
  auto ignored = [&](const char* field, const std::string& why, const std::string& fallback) {
    if (get(field) != defaults.get(field))
      warnings.push_back(std::string(field) + "=" + get(field) + ": " + why + "; falls back to " +
                         fallback);
  };
  if (target == Backend::Auto) {
    warnings.push_back("backend=auto: validate() needs a resolved backend; nothing checked");
    return warnings;
  }
  if (target == Backend::Cpu) {
    const std::string sched = "the cpu backend has its own schedules (per-tile loops, no SIMD groups)";
    ignored("raster_backward", sched, "the per-tile fixed-order reduction");
    ignored("raster_backward_range", sched, "walking from each pixel's last contributor");
    ignored("raster_backward_sparse", sched, "skipping non-contributing splats per pixel");
    ignored("raster_backward_atomic", sched, "no atomics");
    ignored("radix_sort", "the cpu backend bins pairs with a stable counting sort by tile",
            "that counting sort");
    ignored("submission", "the cpu backend runs synchronously", "synchronous execution");
    ignored("forward_submission", "the cpu backend runs synchronously", "synchronous execution");
    ignored("pipelining", "the cpu backend runs synchronously", "off");
    ignored("binning", "the cpu backend keeps its buffers resident", "resident");
    ignored("raster_forward_chunks", sched, "the blend's own stop per pixel");
    if (kernel_overlap == KernelOverlap::Programmatic)
      ignored("kernel_overlap", "the cpu backend runs synchronously", "off");
    return warnings;  // deterministic: always honoured (no float atomics on cpu)
  }
  // GPU backends (metal, cuda) share the SIMT kernels.
  ignored("radix_sort", std::string("no vendor radix sort is available to the ") + backend_name(target) +
                            " backend's run-time compiled kernels",
          "portable");
  ignored("pipelining", "encoding step i+1 while step i runs is not implemented yet", "off");
  if (target == Backend::Metal && kernel_overlap == KernelOverlap::Programmatic)
    ignored("kernel_overlap", "Metal has no programmatic dependent launch", "off");
  if (deterministic) {
    if (raster_backward != defaults.raster_backward || raster_backward_atomic != defaults.raster_backward_atomic ||
        raster_backward_sparse != defaults.raster_backward_sparse)
      warnings.push_back(
          "deterministic=true: the backward writes per-tile partial gradients reduced in a fixed order, so "
          "raster_backward, raster_backward_sparse and raster_backward_atomic have no effect; falls back to "
          "the deterministic reduction");
  }
  return warnings;
}

}  // namespace splat
