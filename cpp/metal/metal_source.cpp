#include "metal_source.h"

#include <set>

#include "../gpu/sources.h"

namespace splat::metal {
namespace {

// The quoted name of an `#include "name"` line, or "".
std::string quoted_include(const std::string& line) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return {};
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return {};
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || line[i] != '"') return {};
  size_t end = line.find('"', i + 1);
  return end == std::string::npos ? std::string() : line.substr(i + 1, end - i - 1);
}

bool is_pragma_once(const std::string& line) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return false;
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 6, "pragma") != 0) return false;
  i = line.find_first_not_of(" \t", i + 6);
  return i != std::string::npos && line.compare(i, 4, "once") == 0;
}

std::string folder_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

class Amalgamator {
 public:
  bool add(const gpu::EmbeddedSource& file, int depth) {
    if (depth > 64) {
      error_ = std::string("includes nested too deeply at ") + file.path;
      return false;
    }
    const std::string path = file.path;
    const std::string text(file.text, file.size);
    out_ += "#line 1 \"" + path + "\"\n";
    size_t pos = 0;
    int line_no = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? text.size() : nl + 1;
      ++line_no;
      if (is_pragma_once(line)) {
        out_ += "\n";
        continue;
      }
      std::string name = quoted_include(line);
      if (name.empty()) {
        out_ += line + "\n";
        continue;
      }
      const gpu::EmbeddedSource* inc = find(folder_of(path), name);
      if (!inc) {
        error_ = path + ":" + std::to_string(line_no) + ": included file \"" + name + "\" is not embedded";
        return false;
      }
      if (done_.insert(inc->path).second) {
        if (!add(*inc, depth + 1)) return false;
        out_ += "#line " + std::to_string(line_no + 1) + " \"" + path + "\"\n";
      } else {
        out_ += "\n";  // already inlined (every header is #pragma once)
      }
    }
    return true;
  }

  const gpu::EmbeddedSource* find(const std::string& own_folder, const std::string& name) const {
    if (const gpu::EmbeddedSource* s = gpu::find_embedded_source(own_folder + name)) return s;
    for (const auto& dir : metal_include_dirs())
      if (const gpu::EmbeddedSource* s = gpu::find_embedded_source(dir + name)) return s;
    return nullptr;
  }

  std::string out_;
  std::string error_;
  std::set<std::string> done_;
};

}  // namespace

const std::vector<std::string>& metal_include_dirs() {
  static const std::vector<std::string> dirs = {"common/", "kernels/", "metal/"};
  return dirs;
}

bool metal_library_source(const std::string& metal_file, std::string* out, std::string* error) {
  const gpu::EmbeddedSource* src = gpu::find_embedded_source("metal/" + metal_file);
  if (!src) {
    if (error) *error = "no embedded source metal/" + metal_file;
    return false;
  }
  Amalgamator a;
  a.done_.insert(src->path);
  if (!a.add(*src, 0)) {
    if (error) *error = a.error_;
    return false;
  }
  if (out) *out = std::move(a.out_);
  return true;
}

}  // namespace splat::metal
