#include "nvrtc_compiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "../gpu/sources.h"
#include "splat/errors.h"

namespace splat::cuda {
namespace {

struct Hash128 {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      a = (a ^ p[i]) * 0x100000001b3ull;
      b = (b ^ p[i]) * 0x100000001b3ull;
      b ^= b >> 29;
    }
  }
  void add(const std::string& s) {
    uint64_t len = s.size();
    add(&len, sizeof(len));
    add(s.data(), s.size());
  }
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    return buf;
  }
};

std::string program_log(const Nvrtc* nv, nvrtcProgram prog) {
  size_t size = 0;
  if (nv->nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return {};
  std::string log(size, '\0');
  if (nv->nvrtcGetProgramLog(prog, &log[0]) != NVRTC_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> compile_options(const std::string& arch, const std::vector<std::string>& defines) {
  // No fast math and no FMA contraction: the kernels follow the same IEEE
  // float32 arithmetic as the CPU backend (shaders/common is shared).
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false",
                                   "--device-as-default-execution-space", "-DSPLAT_NVRTC=1"};
  for (const auto& d : defines) opts.push_back("-D" + d);
  // Developer hook, e.g. SPLAT_NVRTC_OPTIONS=--ptxas-options=-v puts register
  // and spill counts in the compile log (_core.nvrtc_compile_all). Options
  // are part of the cache key.
  if (const char* extra = std::getenv("SPLAT_NVRTC_OPTIONS"); extra && *extra) {
    std::stringstream ss(extra);
    for (std::string o; ss >> o;) opts.push_back(o);
  }
  return opts;
}

CompileOutput compile_cuda_source(const Nvrtc* nv, const std::string& cuda_source, const std::string& arch,
                                  const std::vector<std::string>& defines) {
  CompileOutput out;
  const gpu::EmbeddedSource* src = gpu::find_embedded_source("cuda/" + cuda_source);
  if (!src) {
    out.log = "no embedded source cuda/" + cuda_source;
    return out;
  }
  std::vector<const gpu::EmbeddedSource*> headers = gpu::kernel_headers();
  std::vector<std::string> names;
  std::vector<const char*> header_texts, header_names;
  for (const auto* h : headers) names.push_back(gpu::source_file_name(h->path));
  for (size_t i = 0; i < headers.size(); ++i) {
    header_texts.push_back(headers[i]->text);
    header_names.push_back(names[i].c_str());
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nv->nvrtcCreateProgram(&prog, src->text, cuda_source.c_str(), static_cast<int>(headers.size()),
                                         header_texts.data(), header_names.data());
  if (r != NVRTC_SUCCESS) {
    out.log = std::string("nvrtcCreateProgram: ") + nv->nvrtcGetErrorString(r);
    return out;
  }
  std::vector<std::string> opts = compile_options(arch, defines);
  std::vector<const char*> opt_ptrs;
  for (const auto& o : opts) opt_ptrs.push_back(o.c_str());
  r = nv->nvrtcCompileProgram(prog, static_cast<int>(opt_ptrs.size()), opt_ptrs.data());
  out.log = program_log(nv, prog);
  if (r != NVRTC_SUCCESS) {
    out.log = std::string("nvrtcCompileProgram: ") + nv->nvrtcGetErrorString(r) + "\n" + out.log;
    nv->nvrtcDestroyProgram(&prog);
    return out;
  }
  const bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  if (cubin) {
    if (!nv->nvrtcGetCUBINSize || !nv->nvrtcGetCUBIN) {
      out.log += "\nthis NVRTC cannot return cubins";
    } else if (nv->nvrtcGetCUBINSize(prog, &size) == NVRTC_SUCCESS && size > 0) {
      out.image.resize(size);
      out.ok = nv->nvrtcGetCUBIN(prog, &out.image[0]) == NVRTC_SUCCESS;
    }
  } else if (nv->nvrtcGetPTXSize(prog, &size) == NVRTC_SUCCESS && size > 0) {
    out.image.resize(size);
    out.ok = nv->nvrtcGetPTX(prog, &out.image[0]) == NVRTC_SUCCESS;
    while (!out.image.empty() && out.image.back() == '\0') out.image.pop_back();
    out.image.push_back('\0');  // cuModuleLoadData wants NUL-terminated PTX
  }
  out.is_cubin = cubin;
  if (!out.ok && out.log.empty()) out.log = "NVRTC returned no code";
  nv->nvrtcDestroyProgram(&prog);
  return out;
}

std::string compile_cache_key(const std::string& cuda_source, const std::vector<std::string>& options,
                              const std::string& extra) {
  Hash128 h;
  h.add(cuda_source);
  for (const auto& s : gpu::embedded_sources()) {
    std::string p = s.path;
    if (p.rfind("common/", 0) == 0 || p.rfind("kernels/", 0) == 0 || p == "cuda/" + cuda_source) {
      h.add(p);
      h.add(std::string(s.text, s.size));
    }
  }
  for (const auto& o : options) h.add(o);
  h.add(extra);
  return h.hex();
}

std::string cache_directory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/splat/cuda";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/splat/cuda";
  return {};
}

bool cache_load(const std::string& key, std::string* data) {
  std::string dir = cache_directory();
  if (dir.empty()) return false;
  std::ifstream f(dir + "/" + key + ".bin", std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *data = ss.str();
  return !data->empty();
}

void cache_store(const std::string& key, const std::string& data) {
  std::string dir = cache_directory();
  if (!make_dirs(dir)) return;
  std::string final_path = dir + "/" + key + ".bin";
  std::string tmp = final_path + ".tmp" + std::to_string(static_cast<long long>(getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) std::remove(tmp.c_str());
}

std::vector<KernelCompileReport> compile_all(const std::string& arch) {
  std::string why;
  const Nvrtc* nv = nvrtc(&why);
  if (!nv) throw BackendUnavailable("[cuda] " + why);

  // One compilation per (source file, defines); several kernels share one.
  struct Unit {
    std::string source;
    std::vector<std::string> defines;
    CompileOutput result;
  };
  struct Row {
    gpu::Kernel kernel;
    gpu::Specialization spec;
    size_t unit;
  };
  std::vector<Unit> units;
  std::vector<Row> rows;
  std::map<std::string, size_t> unit_index;
  for (size_t k = 0; k < gpu::kKernelCount; ++k) {
    auto kernel = static_cast<gpu::Kernel>(k);
    const auto& info = gpu::kernel_info(kernel);
    for (const auto& spec : gpu::valid_specializations(kernel)) {
      std::vector<std::string> defines = gpu::specialization_defines(kernel, spec);
      std::string id = info.cuda_source;
      for (const auto& d : defines) id += " " + d;
      auto it = unit_index.find(id);
      if (it == unit_index.end()) {
        it = unit_index.emplace(id, units.size()).first;
        units.push_back(Unit{info.cuda_source, defines, {}});
      }
      rows.push_back(Row{kernel, spec, it->second});
    }
  }

  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < units.size(); i = next++)
      units[i].result = compile_cuda_source(nv, units[i].source, arch, units[i].defines);
  };
  size_t threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  std::vector<KernelCompileReport> out;
  for (const auto& row : rows) {
    const auto& info = gpu::kernel_info(row.kernel);
    const CompileOutput& res = units[row.unit].result;
    KernelCompileReport rep;
    rep.kernel = info.entry;
    rep.specialization = gpu::specialization_label(row.kernel, row.spec);
    rep.ok = res.ok;
    rep.log = res.log;
    // The entry point must be in the module.
    if (res.ok && !res.is_cubin && res.image.find(std::string(".entry ") + info.entry + "(") == std::string::npos) {
      rep.ok = false;
      rep.log += "\nentry point " + std::string(info.entry) + " not found in the PTX";
    }
    out.push_back(std::move(rep));
  }
  return out;
}

}  // namespace splat::cuda
