// The Device interface: what the core asks of a backend. The CPU backend
// implements it directly; Metal and CUDA implement it through cpp/gpu/, which
// turns each op into kernel launches on a Launcher.
#pragma once
#include <memory>
#include <string>

#include "config.h"
#include "types.h"

namespace splat {

class Device {
 public:
  virtual ~Device() = default;

  virtual Backend backend() const = 0;
  virtual std::string description() const = 0;

  // Renders `g` from `cam`. Keeps what the backward needs (the parameters are
  // copied into the device's resident buffers, which only grow).
  virtual void rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                 const float background[3], const ForwardOutputs& out) = 0;

  // Backward of the last forward. d_alpha may be null (zero).
  virtual void rasterize_backward(const float* d_image, const float* d_alpha,
                                  const GradientOutputs& grads) = 0;

  // Number of buffer (re)allocations so far: constant once warm.
  virtual size_t allocation_count() const = 0;
};

// Creates the device `config.backend` names (auto resolved as documented).
// Throws BackendUnavailable with the reason when it cannot run here.
std::unique_ptr<Device> create_device(const BackendConfig& config);

// The backend `auto` resolves to on this machine.
Backend resolve_backend(Backend requested);

// Whether `b` can run here; when not, `reason` says why.
bool backend_available(Backend b, std::string* reason);

}  // namespace splat
