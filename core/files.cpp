#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/limits.hpp"
#include "core/process.hpp"
#include "core/text.hpp"
#include "core/units.hpp"

namespace hgsim::core {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::optional<std::string> special_file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return std::nullopt;
  return kind_of(st.st_mode);
}

std::optional<std::string> read_input_file(const std::string& path, std::string_view what,
                                           Diagnostics& diags, SourceLocation where,
                                           const std::string& key_path) {
  if (where.file.empty()) where = {path, 0, 0};
  const std::string named = std::string(what) + " '" + path_excerpt(path) + "'";
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  Fd file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (file.fd < 0) {
    diags.error(where, key_path, "cannot open " + named + ": " + std::strerror(errno));
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    diags.error(where, key_path, named + " is " + kind_of(st.st_mode),
                "hgsim reads regular files only");
    return std::nullopt;
  }
  const std::int64_t limit = limits().input_bytes;
  auto too_large = [&] {
    diags.error(where, key_path,
                named + " is larger than " + human_size(Bytes(static_cast<double>(limit))),
                limit_hint("HGSIM_MAX_INPUT_BYTES", static_cast<double>(limit)));
  };
  if (st.st_size > limit) {
    too_large();
    return std::nullopt;
  }
  // Bounded read: a file may grow while it is read, or report no size (/proc files).
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      diags.error(where, key_path, "cannot read " + named + ": " + std::strerror(errno));
      return std::nullopt;
    }
    if (n == 0) break;
    if (static_cast<std::int64_t>(text.size()) + n > limit) {
      too_large();
      return std::nullopt;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

std::optional<SourceLocation> first_invalid_utf8(std::string_view text, const std::string& file) {
  int line = 1;
  int column = 1;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t min = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      length = 1;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2, min = 0x80, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, min = 0x800, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, min = 0x10000, code = c & 0x07;
    } else {
      return SourceLocation{file, line, column};
    }
    if (i + length > text.size()) return SourceLocation{file, line, column};
    for (std::size_t k = 1; k < length; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return SourceLocation{file, line, column};
      code = (code << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (length > 1 && (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)))
      return SourceLocation{file, line, column};
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      column += static_cast<int>(length);
    }
    i += length;
  }
  return std::nullopt;
}

std::optional<std::string> write_all_fd(int fd, std::string_view text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::string(n < 0 ? std::strerror(errno) : "nothing written");
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw WriteError("cannot write a file with an empty name");
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) fail("it is a directory");
    out_.open(path_, std::ios::binary | std::ios::trunc);  // /dev/stdout, a FIFO, ...
    if (!out_) fail(std::strerror(errno));
    return;
  }
  const std::filesystem::path target(path_);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  temp_ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(temp_.data());
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    temp_.clear();
    fail(why);
  }
  track_temporary_file(temp_);
  // mkstemp makes the file 0600; a result is as readable as any new file of the user's.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  out_.open(temp_, std::ios::binary | std::ios::trunc);
  if (!out_) fail(std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (committed_ || temp_.empty()) return;
  out_.close();
  ::unlink(temp_.c_str());
  untrack_temporary_file(temp_);
}

void AtomicFile::fail(const std::string& why) {
  if (!temp_.empty()) {
    out_.close();
    ::unlink(temp_.c_str());
    untrack_temporary_file(temp_);
    temp_.clear();
  }
  committed_ = true;  // nothing left to clean up
  throw WriteError("cannot write '" + path_excerpt(path_) + "': " + why);
}

void AtomicFile::commit() {
  errno = 0;
  out_.flush();
  if (!out_) fail(errno ? std::strerror(errno) : "the write failed");
  out_.close();
  if (out_.fail()) fail(errno ? std::strerror(errno) : "closing failed");
  if (temp_.empty()) {
    committed_ = true;
    return;
  }
  Fd file{::open(temp_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0 || ::fsync(file.fd) != 0) fail(std::strerror(errno));
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail(std::strerror(errno));
  untrack_temporary_file(temp_);
  committed_ = true;
}

std::optional<std::string> write_file_atomically(const std::string& path,
                                                 std::string_view contents) {
  try {
    AtomicFile file(path);
    file.stream().write(contents.data(), static_cast<std::streamsize>(contents.size()));
    file.commit();
    return std::nullopt;
  } catch (const WriteError& e) {
    return std::string(e.what());
  }
}

}  // namespace hgsim::core
