// _hgsim: the hgsim Python module's compiled half (python/hgsim/__init__.py re-exports it).
// docs/python.md documents this API.
#include <cmath>
#include <vector>

#include <pybind11/pybind11.h>

#include "compress/codec.hpp"
#include "python/bindings.hpp"

namespace hgsim::python {

std::string message_of(const core::Diagnostics& diags) {
  std::string text = diags.format();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

void raise_or_warn(const core::Diagnostics& diags) {
  if (diags.has_errors()) throw Error(message_of(diags));
  if (diags.empty()) return;
  py::module_::import("warnings")
      .attr("warn")(message_of(diags), py::module_::import("builtins").attr("UserWarning"), 2);
}

namespace {

// What json.dumps cannot write itself: NumPy scalars (their .item()) and paths (as text),
// so that a scenario dict edited with either still loads.
py::object json_default(py::handle value) {
  if (py::hasattr(value, "__fspath__")) return py::module_::import("os").attr("fspath")(value);
  if (py::hasattr(value, "item")) return value.attr("item")();
  throw py::type_error("cannot write a " +
                       core::excerpt(text_of(value.get_type().attr("__name__"))) +
                       " into a scenario, plan or codec: use numbers, strings, lists and dicts");
}

// Past this depth the walk below leaves the value to json.dumps, whose recursion limit
// (1000 by default) reports it as nesting too deep.
constexpr std::size_t kMaxCheckedDepth = 2000;

// The key path of a value for a message ("wan[0].bandwidth"), from its parts ("wan",
// "[0]", "bandwidth"); "the value" for the root.
std::string where_of(const std::vector<std::string>& parts) {
  if (parts.empty()) return "the value";
  std::string path;
  for (const std::string& part : parts)
    path += (path.empty() || (!part.empty() && part.front() == '[') ? "" : ".") + part;
  return path;
}

// A key or text as a message quotes it: a lone surrogate written out (\udcff), as Python
// writes it.
std::string surrogates_written(py::handle value) {
  if (!py::isinstance<py::str>(value)) return text_of(value);
  PyObject* bytes = PyUnicode_AsEncodedString(value.ptr(), "utf-8", "backslashreplace");
  if (bytes == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::bytes>(bytes);
}

// What json.dumps would report without saying where (a circular reference, an array of
// more than one value, a lone surrogate that UTF-8 cannot hold, NaN), found with the key
// path of the value. `open` holds the dicts and lists being walked: meeting one again is a
// cycle.
void check_writable(py::handle value, std::vector<std::string>& parts,
                    std::vector<PyObject*>& open) {
  if (open.size() > kMaxCheckedDepth) return;
  if (py::isinstance<py::str>(value)) {
    PyObject* bytes = PyUnicode_AsUTF8String(value.ptr());
    if (bytes != nullptr) {
      Py_DECREF(bytes);
      return;
    }
    PyErr_Clear();
    throw Error(where_of(parts) + ": not valid UTF-8 text (a lone surrogate, in '" +
                core::excerpt(surrogates_written(value)) + "')");
  }
  if (py::isinstance<py::float_>(value)) {
    if (!std::isfinite(value.cast<double>()))
      throw Error(where_of(parts) +
                  ": a float NaN or infinity cannot be a value of a scenario, plan or codec");
    return;
  }
  if (value.is_none() || py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value))
    return;
  const bool is_dict = py::isinstance<py::dict>(value);
  const bool is_list = py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value);
  if (!is_dict && !is_list) {
    if (py::hasattr(value, "__fspath__")) return;
    // A NumPy scalar (or a 0-d array) is written as its .item(); a larger array is not one
    // value.
    if (py::hasattr(value, "item") &&
        (!py::hasattr(value, "ndim") || value.attr("ndim").cast<int>() == 0))
      return;
    throw py::type_error(where_of(parts) + ": cannot write a " +
                         core::excerpt(text_of(value.get_type().attr("__name__"))) +
                         " into a scenario, plan or codec: use numbers, strings, lists and "
                         "dicts" +
                         (py::hasattr(value, "tolist") ? " (.tolist() makes a list)" : ""));
  }
  for (PyObject* seen : open)
    if (seen == value.ptr()) throw Error("circular reference at " + where_of(parts));
  open.push_back(value.ptr());
  if (is_dict) {
    for (auto [key, item] : py::reinterpret_borrow<py::dict>(value)) {
      parts.push_back(core::excerpt(surrogates_written(key)));
      if (py::isinstance<py::str>(key)) check_writable(key, parts, open);
      check_writable(item, parts, open);
      parts.pop_back();
    }
  } else {
    std::size_t i = 0;
    for (py::handle item : value) {
      parts.push_back("[" + std::to_string(i++) + "]");
      check_writable(item, parts, open);
      parts.pop_back();
    }
  }
  open.pop_back();
}

// json.dumps of the object; a structure nested past Python's recursion limit is an
// hgsim.Error like any other bad document.
std::string json_text(py::handle object) {
  std::vector<std::string> parts;
  std::vector<PyObject*> open;
  check_writable(object, parts, open);
  try {
    return py::str(py::module_::import("json").attr("dumps")(
        object, py::arg("default") = py::cpp_function(&json_default),
        py::arg("allow_nan") = false));
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_RecursionError))
      throw Error("the value nests too deep to be a scenario, plan or codec");
    // allow_nan=False: JSON, and so the scenario language, has no NaN or infinity.
    if (e.matches(PyExc_ValueError))
      throw Error("a float NaN or infinity cannot be a value of a scenario, plan or codec (" +
                  core::excerpt(text_of(e.value())) + ")");
    throw;
  }
}

// A dict read like a JSON file: the same limits (depth, values) and checks apply.
core::Node node_of_dict(py::handle object) {
  core::Diagnostics diags;
  auto node = core::parse_json(json_text(object), "", diags);
  if (!node) throw Error(message_of(diags));
  return *node;
}

}  // namespace

core::Json to_json(py::handle object) {
  return core::Json::parse(json_text(object));
}

py::object from_json(const core::Json& json) {
  return py::module_::import("json").attr("loads")(json.dump());
}

std::string text_of(py::handle object) {
  const py::str text(object);
  // A lone surrogate cannot be UTF-8: an escaped byte (surrogateescape, how Python reads a
  // file name that is not UTF-8) becomes that byte again, any other is written as \udXXX.
  PyObject* bytes = PyUnicode_AsEncodedString(text.ptr(), "utf-8", "surrogateescape");
  if (bytes == nullptr) {
    PyErr_Clear();
    bytes = PyUnicode_AsEncodedString(text.ptr(), "utf-8", "backslashreplace");
  }
  if (bytes == nullptr) throw py::error_already_set();
  const py::bytes owned = py::reinterpret_steal<py::bytes>(bytes);
  return owned;
}

std::string path_text(py::handle path) {
  // os.fspath: str, bytes or os.PathLike (TypeError for anything else). A str is encoded as
  // the file system encodes it (os.fsencode): a name read from a directory that is not UTF-8
  // ('\udcff', surrogateescape) names the same file again.
  const py::object os = py::module_::import("os");
  const py::object fs_path = os.attr("fspath")(path);
  std::string text;
  if (py::isinstance<py::bytes>(fs_path)) {
    text = fs_path.cast<std::string>();
  } else {
    PyObject* bytes = PyUnicode_EncodeFSDefault(fs_path.ptr());
    if (bytes == nullptr) {
      PyErr_Clear();
      throw Error("the path '" + core::excerpt(text_of(fs_path)) +
                  "' cannot be a file name: it holds a surrogate that is not an escaped byte");
    }
    text = py::reinterpret_steal<py::bytes>(bytes);
  }
  // The C library reads a path up to its first NUL: "s.yaml\0x" would open s.yaml.
  if (text.find('\0') != std::string::npos)
    throw Error("the path '" + core::excerpt(text) + "' holds a NUL character");
  if (text.empty()) throw Error("an empty path");
  return text;
}

Document read_document(py::handle source, const char* what) {
  if (py::isinstance<py::dict>(source)) return {node_of_dict(source), ""};
  if (py::isinstance<py::str>(source) || py::isinstance<py::bytes>(source) ||
      py::hasattr(source, "__fspath__")) {
    const std::string path = path_text(source);
    core::Diagnostics diags;
    auto node = core::load_document(path, diags);
    if (!node || diags.has_errors()) {
      if (!diags.has_errors())
        diags.error({path, 0, 0}, "", std::string("cannot read the ") + what);
      throw Error(message_of(diags));
    }
    return {*node, path};
  }
  throw py::type_error(std::string("a ") + what +
                       " is a path (str or os.PathLike) to a YAML/JSON file or a dict, not " +
                       core::excerpt(text_of(source.get_type().attr("__name__"))));
}

}  // namespace hgsim::python

PYBIND11_MODULE(_hgsim, m) {
  namespace py = pybind11;
  using namespace hgsim::python;
  m.doc() = "hgsim: plan and simulate training on heterogeneous GPU clusters; codecs";
  // Registered first, so tried last: any C++ exception the module's own translators do not
  // claim (std::runtime_error, nlohmann's errors, std::bad_alloc, ...) reaches Python as
  // hgsim.Error, never as a bare RuntimeError. Python's own exceptions (TypeError from
  // pybind11's argument checks, KeyboardInterrupt) pass through untouched.
  static PyObject* error_type = nullptr;  // the module lives as long as the interpreter
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::bad_alloc&) {
      PyErr_SetString(error_type, "out of memory (std::bad_alloc)");
    } catch (const std::exception& e) {
      PyErr_SetString(error_type, e.what());
    }
  });
  auto& error = py::register_exception<Error>(m, "Error", PyExc_ValueError);
  error_type = error.ptr();
  error.attr("__doc__") =
      "A problem with a scenario, plan or profile; the message lists every problem "
      "(file:line:column or key path, what is wrong, what would be right).";
  auto& codec_error =
      py::register_exception<hgsim::compress::CodecError>(m, "CodecError", error.ptr());
  codec_error.attr("__doc__") = "A problem with a codec, its arguments or an encoded buffer.";
  // The one rule for quoting input in a message (core/document.hpp), for hgsim.plots.
  m.def(
      "excerpt", [](const std::string& text) { return hgsim::core::excerpt(text); },
      py::arg("text"), "At most 60 characters of text, terminal controls escaped.");
  m.def(
      "escaped", [](const std::string& text) { return hgsim::core::escaped(text); },
      py::arg("text"), "text with every character a terminal would act on escaped.");
  bind_scenario(m);
  bind_codecs(m);
  bind_collectives(m);
  bind_kernels(m);
}
