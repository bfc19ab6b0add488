// Errors raised by the native core. The bindings map them to Python
// exceptions: ConfigError -> ValueError, BackendUnavailable and
// BackendError -> RuntimeError, TrainingDiverged -> splat.TrainingDiverged
// (a RuntimeError). Messages carry a "[component]" prefix.
#pragma once
#include <stdexcept>
#include <string>

namespace splat {

// An invalid configuration field or value, or an invalid argument.
struct ConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A backend that was not built or cannot run here (no driver, no device).
struct BackendUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failure inside a backend (driver / compiler / command buffer errors).
struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The loss or a parameter of a training run is no longer finite.
struct TrainingDiverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace splat
