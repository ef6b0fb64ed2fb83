// Shared pieces of the _hgsim extension: the exceptions, JSON <-> Python conversion, and
// the two halves of the API (scenario_bindings.cpp, codec_bindings.cpp).
#pragma once

#include <stdexcept>
#include <string>

#include <pybind11/pybind11.h>

#include "core/diagnostics.hpp"
#include "core/document.hpp"

namespace hgsim::python {

namespace py = pybind11;

// hgsim.Error (a ValueError): the message is the diagnostics text, every problem found.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every diagnostic, one a line (without the last newline): the message of an exception.
std::string message_of(const core::Diagnostics& diags);

// Raises hgsim.Error with every diagnostic when there are errors; otherwise turns the
// warnings into Python warnings. Call with the GIL held.
void raise_or_warn(const core::Diagnostics& diags);

// Any JSON-serialisable Python object <-> JSON (through Python's json module, so that the
// numbers and strings are exactly what json.dumps/json.loads make of them).
core::Json to_json(py::handle object);
py::object from_json(const core::Json& json);

// A scenario or plan argument: a path (str or os.PathLike) to YAML/JSON, or a dict.
struct Document {
  core::Node node;
  std::string path;  // the file, or "" for a dict
};
// Raises hgsim.Error when the file cannot be read, TypeError for anything else.
Document read_document(py::handle source, const char* what);
// A path (str, bytes or os.PathLike) as the file system names it (os.fsencode: a str
// holding escaped bytes, '\udcff', names the file of that byte); Error for an empty path,
// one holding a NUL character, or a surrogate that is not an escaped byte.
std::string path_text(py::handle path);
// str(object) as UTF-8 bytes for a message, never raising on a lone surrogate (an escaped
// byte becomes that byte, which core::excerpt then shows as \xNN). Quote it through
// core::excerpt.
std::string text_of(py::handle object);

void bind_scenario(py::module_& m);
void bind_codecs(py::module_& m);
void bind_collectives(py::module_& m);
void bind_kernels(py::module_& m);

}  // namespace hgsim::python
