// Reading input files without hanging or exhausting memory, and writing output files so
// that nothing half-written is ever left under the name the user asked for.
#pragma once

#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/diagnostics.hpp"

namespace hgsim::core {

// Reads a whole input file: only a regular file (a FIFO, a device such as /dev/zero, a
// directory or a socket is refused before any read, so nothing blocks), at most
// limits().input_bytes of it. `what` names the file in messages ("scenario", "bandwidth
// trace"). Problems go to `diags` at `where` (the file itself when `where` is empty).
std::optional<std::string> read_input_file(const std::string& path, std::string_view what,
                                           Diagnostics& diags, SourceLocation where = {},
                                           const std::string& key_path = {});

// What `path` is when it exists but is not a regular file ("a directory", "a character
// device", ...), followed through symbolic links; nullopt for a regular file or none at all.
// For files hgsim keeps state in (a sweep database), where /dev/full or a folder would fail
// later with a confusing error.
std::optional<std::string> special_file_kind(const std::string& path);

// The first byte sequence that is not UTF-8 in `text`, as a 1-based line and column
// (columns count bytes); nullopt when all of it is UTF-8.
std::optional<SourceLocation> first_invalid_utf8(std::string_view text, const std::string& file);

// A file written atomically: the text goes to a temporary file in the same folder
// (".NAME.tmp-XXXXXX"), and commit() flushes it to disk (fsync) and renames it over `path`.
// Until then `path` is untouched; if commit() is never reached (an exception, a signal:
// the termination handlers know the temporary name) the temporary file is removed. A path
// that is not a regular file (/dev/stdout, /dev/null, a FIFO) is written directly, since
// nothing can be renamed over it. Every hgsim output file is written through this class.
class AtomicFile {
 public:
  // Throws WriteError when the temporary file cannot be made (no such folder, no right).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  // Throws WriteError ("cannot write 'out.json': No space left on device") on any failure
  // of the writes so far, the flush, fsync or rename.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& why);
  std::string path_;
  std::string temp_;  // empty when writing `path_` directly
  std::ofstream out_;
  bool committed_ = false;
};

struct WriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// AtomicFile for a whole text at once; nullopt on success, else the reason.
std::optional<std::string> write_file_atomically(const std::string& path,
                                                 std::string_view contents);

// Writes all of `text` to a file descriptor (stdout: 1), retrying short writes and EINTR.
// Returns the errno text of the first failure, nullopt on success.
std::optional<std::string> write_all_fd(int fd, std::string_view text);

}  // namespace hgsim::core
