// BackendConfig and backend discovery.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "splat/config.h"
#include "splat/device.h"
#include "splat/errors.h"

namespace nb = nanobind;

namespace splat::bindings {
namespace {

// Python value -> value name: str as is; bool fields also take True/False.
std::string value_name(const char* field, nb::handle value) {
  bool known = false, is_bool_field = false;
  for (const auto& f : BackendConfig::fields())
    if (std::string(f.name) == field) known = true, is_bool_field = f.is_bool;
  // An unknown field is that error, whatever its value's type.
  if (!known) (void)BackendConfig().get(field);  // throws "[BackendConfig] unknown field ..."
  if (nb::isinstance<nb::bool_>(value)) {
    if (!is_bool_field)
      throw ConfigError(std::string("[BackendConfig] ") + field + ": expected a string, got a bool");
    return nb::cast<bool>(value) ? "true" : "false";
  }
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  throw ConfigError(std::string("[BackendConfig] ") + field + ": expected a string, got " +
                    nb::cast<std::string>(nb::str(value.type().attr("__name__"))));
}

nb::object value_object(const BackendConfig& c, const char* field) {
  std::string v = c.get(field);
  for (const auto& f : BackendConfig::fields())
    if (std::string(f.name) == field && f.is_bool) return nb::bool_(v == "true");
  return nb::str(v.c_str());
}

void apply(BackendConfig& c, nb::handle mapping) {
  for (auto item : nb::borrow<nb::dict>(mapping)) {
    if (!nb::isinstance<nb::str>(item.first)) throw ConfigError("[BackendConfig] field names must be strings");
    std::string key = nb::cast<std::string>(item.first);
    c.set(key, value_name(key.c_str(), item.second));
  }
}

nb::dict to_dict(const BackendConfig& c) {
  nb::dict d;
  for (const auto& f : BackendConfig::fields()) d[f.name] = value_object(c, f.name);
  return d;
}

}  // namespace

void bind_config(nb::module_& m) {
  auto cls = nb::class_<BackendConfig>(m, "BackendConfig",
                                       "Switches for every backend; see BackendConfig.fields() for values.");
  cls.def(
      "__init__",
      [](BackendConfig* self, nb::dict mapping, nb::kwargs kwargs) {
        new (self) BackendConfig();
        apply(*self, mapping);
        apply(*self, kwargs);
      },
      nb::arg("mapping") = nb::dict(), nb::arg("kwargs"),
      "BackendConfig(mapping={}, **fields): fields from a dict (a TOML [backend] table) and/or keywords.");
  for (const auto& f : BackendConfig::fields()) {
    const char* name = f.name;
    cls.def_prop_rw(
        name, [name](const BackendConfig& c) { return value_object(c, name); },
        [name](BackendConfig& c, nb::handle v) { c.set(name, value_name(name, v)); });
  }
  cls.def_static(
         "from_dict",
         [](nb::dict d) {
           BackendConfig c;
           apply(c, d);
           return c;
         },
         nb::arg("mapping"))
      .def("to_dict", &to_dict)
      .def_static("fields",
                  [] {
                    nb::dict d;
                    for (const auto& f : BackendConfig::fields()) {
                      nb::list values;
                      for (const char* v : f.values) values.append(nb::str(v));
                      d[f.name] = values;
                    }
                    return d;
                  })
      .def(
          "validate",
          [](const BackendConfig& c, const std::string& backend) {
            Backend b = parse_backend(backend == "" ? c.get("backend") : backend);
            return c.validate(resolve_backend(b));
          },
          nb::arg("backend") = "",
          "Warnings for switches the backend cannot honour, each with the fallback it takes.")
      .def("resolved_backend", [](const BackendConfig& c) { return std::string(backend_name(resolve_backend(c.backend))); })
      .def("__eq__", [](const BackendConfig& a, nb::handle b) {
        return nb::isinstance<BackendConfig>(b) && a == nb::cast<const BackendConfig&>(b);
      })
      .def("__repr__", &BackendConfig::repr)
      .def("__copy__", [](const BackendConfig& c) { return c; })
      .def("__deepcopy__", [](const BackendConfig& c, nb::handle) { return c; }, nb::arg("memo"));
  cls.attr("__hash__") = nb::none();

  m.def(
      "backend_available",
      [](const std::string& name) {
        std::string why;
        bool ok = backend_available(parse_backend(name), &why);
        return std::make_pair(ok, why);
      },
      nb::arg("backend"), "(available, reason) for 'cpu', 'cuda', 'metal' or 'auto'.");
  m.def(
      "resolve_backend", [](const std::string& name) { return std::string(backend_name(resolve_backend(parse_backend(name)))); },
      nb::arg("backend"));
}

}  // namespace splat::bindings
