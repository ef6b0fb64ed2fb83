// Reading input files without hanging or exhausting memory, and writing output files so
// that nothing half-written is ever left under the name the user asked for.
#pragma once

#include <fstream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/process.hpp"

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

// Why `path` may not be an output file, or nullopt when it may: a path that does not exist
// yet, a regular file, a character device (/dev/null, /dev/stdout on a terminal) or a FIFO
// that something reads (a shell's `>(gzip > t.gz)`). A directory, a block device, a socket
// and a FIFO that nothing reads ("a FIFO (named pipe) that nothing reads: ...") are refused,
// so that no writer ever blocks opening one. `fd`, when given, receives the path opened for
// writing (O_NONBLOCK cleared) when it is not a regular file; the caller closes it. Without
// `fd` a FIFO's reader sees the probe's writer come and go (the end of its input): only a
// writer that keeps the descriptor, AtomicFile, should ask about a FIFO. The rule
// of every hgsim output (python/hgsim/files.py follows it, and a test holds them together).
std::optional<std::string> output_refusal(const std::string& path, int* fd = nullptr);

// What a write that failed with `error` (an errno) should add to its message: the limit it
// hit and how to raise it (EFBIG: the file-size limit, `ulimit -f`), else "".
std::string write_error_hint(int error);

// A std::streambuf over a file descriptor that keeps the errno of its first failed write
// (a std::ofstream forgets it), so that "File too large" reaches the message.
class FdBuffer : public std::streambuf {
 public:
  FdBuffer();
  void attach(int fd) { fd_ = fd; }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  bool drain();
  int fd_ = -1;
  int error_ = 0;
  std::vector<char> buffer_;
};

// A file written atomically: the text goes to a temporary file in the same folder
// (".NAME.tmp-XXXXXX"), and commit() flushes it to disk (fsync) and renames it over `path`.
// Until then `path` is untouched; if commit() is never reached (an exception, a signal:
// the termination handlers know the temporary name) the temporary file is removed. A path
// that is not a regular file is checked by output_refusal() (a FIFO nothing reads is refused,
// never waited on) and written directly, since nothing can be renamed over it. Every hgsim
// output file is written through this class.
class AtomicFile {
 public:
  // Throws WriteError when the temporary file cannot be made (no such folder, no right)
  // or output_refusal() refuses `path`.
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
  [[noreturn]] void fail_errno(int error);
  void close_fd();
  std::string path_;
  std::string temp_;  // empty when writing `path_` directly
  int fd_ = -1;
  FdBuffer buffer_;
  std::ostream out_{&buffer_};
  bool committed_ = false;
};

struct WriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// AtomicFile for a whole text at once; nullopt on success, else the reason.
std::optional<std::string> write_file_atomically(const std::string& path,
                                                 std::string_view contents);

// The folder hgsim's own temporary files go in: $TMPDIR when it is set and not empty, else
// /tmp. Throws EnvironmentLimit naming TMPDIR when it is not a folder this process can write
// in (std::filesystem::temp_directory_path's "filesystem error" says neither).
std::string temporary_folder();

// A temporary file of hgsim's own in temporary_folder(), "PREFIX-XXXXXXSUFFIX", made with
// mkstemps (no other process can take the name), tracked so that a signal removes it, and
// removed when this ends. Throws EnvironmentLimit when it cannot be made.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& prefix, const std::string& suffix);
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes all of `text` to a file descriptor (stdout: 1), retrying short writes and EINTR.
// Returns the errno text of the first failure, nullopt on success.
std::optional<std::string> write_all_fd(int fd, std::string_view text);

}  // namespace hgsim::core
