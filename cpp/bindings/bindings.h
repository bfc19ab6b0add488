// One registration function per bound area; module.cpp calls them all.
#pragma once
#include <nanobind/nanobind.h>

#include <mutex>

#include "splat/device.h"

namespace splat::bindings {

// The threading model (docs/architecture.md, "Threads"): each native object
// serves one call at a time. A method takes its object's lock first; a thread
// that must wait does so with the GIL released, so the call in progress can
// take the GIL back when it returns.
class ObjectLock {
 public:
  explicit ObjectLock(std::mutex& m) : lock_(m, std::defer_lock) {
    if (!lock_.try_lock()) {
      nanobind::gil_scoped_release release;
      lock_.lock();
    }
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

// {uploads, upload_bytes, downloads, download_bytes}: a device's host copies so far.
inline nanobind::dict transfers_dict(const Device::HostTransfers& t) {
  nanobind::dict d;
  d["uploads"] = t.uploads;
  d["upload_bytes"] = t.upload_bytes;
  d["downloads"] = t.downloads;
  d["download_bytes"] = t.download_bytes;
  return d;
}

void bind_config(nanobind::module_& m);
void bind_rasterizer(nanobind::module_& m);
void bind_raster_views(nanobind::module_& m);
void bind_gpu(nanobind::module_& m);
void bind_trainer(nanobind::module_& m);

}  // namespace splat::bindings
