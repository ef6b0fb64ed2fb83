#include "core/files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

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
  std::vector<char> buffer(kPipeChunk);  // on the heap: see kPipeChunk
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer.data(), buffer.size());
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
    text.append(buffer.data(), static_cast<std::size_t>(n));
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

std::optional<std::string> output_refusal(const std::string& path, int* fd) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return std::nullopt;
  if (S_ISDIR(st.st_mode)) return "it is a directory; give a file name";
  if (S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode))
    return "it is " + kind_of(st.st_mode) +
           "; hgsim writes a regular file, a character device (/dev/null) or a FIFO that "
           "something reads";
  // A FIFO opened for writing would wait for a reader: O_NONBLOCK makes it fail at once
  // (ENXIO) when there is none. A device is opened the same way (a serial line would wait
  // for its carrier), then written blocking like any file.
  const int opened = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (opened < 0) {
    const int error = errno;
    if (error == ENXIO && S_ISFIFO(st.st_mode))
      return "it is a FIFO (named pipe) that nothing reads; start its reader first, or name "
             "a regular file";
    return std::string(std::strerror(error)) + write_error_hint(error);
  }
  const int flags = ::fcntl(opened, F_GETFL);
  if (flags >= 0) ::fcntl(opened, F_SETFL, flags & ~O_NONBLOCK);
  if (fd != nullptr)
    *fd = opened;
  else
    ::close(opened);
  return std::nullopt;
}

std::string write_error_hint(int error) {
  if (error != EFBIG) return "";
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
  return " (the file-size limit, ulimit -f, is " +
         human_size(Bytes(static_cast<double>(limit.rlim_cur))) +
         "; raise it, e.g. ulimit -f unlimited)";
}

FdBuffer::FdBuffer() : buffer_(1 << 16) {
  setp(buffer_.data(), buffer_.data() + buffer_.size());
}

bool FdBuffer::drain() {
  if (error_ != 0) return false;
  const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
  setp(buffer_.data(), buffer_.data() + buffer_.size());
  if (n == 0) return true;
  if (write_all_fd(fd_, std::string_view(buffer_.data(), n))) {
    error_ = errno != 0 ? errno : EIO;
    return false;
  }
  return true;
}

FdBuffer::int_type FdBuffer::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  *pptr() = traits_type::to_char_type(c);
  pbump(1);
  return c;
}

std::streamsize FdBuffer::xsputn(const char* s, std::streamsize n) {
  const std::streamsize room = epptr() - pptr();
  if (n <= room) {
    std::memcpy(pptr(), s, static_cast<std::size_t>(n));
    pbump(static_cast<int>(n));
    return n;
  }
  if (!drain()) return 0;
  if (n < static_cast<std::streamsize>(buffer_.size())) return xsputn(s, n);
  if (write_all_fd(fd_, std::string_view(s, static_cast<std::size_t>(n)))) {
    error_ = errno != 0 ? errno : EIO;
    return 0;
  }
  return n;
}

int FdBuffer::sync() {
  return drain() ? 0 : -1;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw WriteError("cannot write a file with an empty name");
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // /dev/stdout, /dev/null, a FIFO that something reads: written directly.
    if (auto why = output_refusal(path_, &fd_)) fail(*why);
    if (fd_ < 0) fail("it changed while it was opened");
    buffer_.attach(fd_);
    return;
  }
  const std::filesystem::path target(path_);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  temp_ = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkostemp(temp_.data(), O_CLOEXEC);
  if (fd_ < 0) {
    const int error = errno;
    temp_.clear();
    fail_errno(error);
  }
  track_temporary_file(temp_);
  // mkstemp makes the file 0600; a result is as readable as any new file of the user's.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  buffer_.attach(fd_);
}

AtomicFile::~AtomicFile() {
  close_fd();
  if (committed_ || temp_.empty()) return;
  ::unlink(temp_.c_str());
  untrack_temporary_file(temp_);
}

void AtomicFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void AtomicFile::fail(const std::string& why) {
  close_fd();
  if (!temp_.empty()) {
    ::unlink(temp_.c_str());
    untrack_temporary_file(temp_);
    temp_.clear();
  }
  committed_ = true;  // nothing left to clean up
  throw WriteError("cannot write '" + path_excerpt(path_) + "': " + why);
}

void AtomicFile::fail_errno(int error) {
  fail(std::string(std::strerror(error)) + write_error_hint(error));
}

void AtomicFile::commit() {
  out_.flush();
  if (buffer_.error() != 0) fail_errno(buffer_.error());
  if (!out_) fail("the write failed");
  if (!temp_.empty() && ::fsync(fd_) != 0) fail_errno(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) {
    const int error = errno;
    fail_errno(error);
  }
  if (temp_.empty()) {
    committed_ = true;
    return;
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail_errno(errno);
  untrack_temporary_file(temp_);
  committed_ = true;
}

std::string temporary_folder() {
  const char* variable = std::getenv("TMPDIR");
  const bool from_variable = variable != nullptr && *variable != '\0';
  const std::string folder = from_variable ? variable : "/tmp";
  const std::string named = from_variable ? "TMPDIR='" + path_excerpt(folder) + "'"
                                          : std::string("'/tmp' (TMPDIR is not set)");
  auto refuse = [&](const std::string& why) {
    throw EnvironmentLimit("the folder for temporary files, " + named + ", " + why +
                           ": set TMPDIR to a folder hgsim may write in" +
                           (from_variable ? ", or unset it for /tmp" : ""));
  };
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0)
    refuse(std::string("cannot be used: ") + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) refuse("is " + kind_of(st.st_mode) + ", not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    refuse(std::string("cannot be written in: ") + std::strerror(errno));
  return folder;
}

TemporaryFile::TemporaryFile(const std::string& prefix, const std::string& suffix) {
  std::string name = temporary_folder() + "/" + prefix + "-XXXXXX" + suffix;
  const int fd = ::mkostemps(name.data(), static_cast<int>(suffix.size()), O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (const auto limit = limit_behind(error, "open"))
      throw EnvironmentLimit("cannot make a temporary file: " + *limit);
    throw EnvironmentLimit("cannot make a temporary file in '" + path_excerpt(temporary_folder()) +
                           "': " + std::strerror(error) + write_error_hint(error) +
                           "; set TMPDIR to a folder hgsim may write in");
  }
  ::close(fd);
  path_ = std::move(name);
  track_temporary_file(path_);
}

TemporaryFile::~TemporaryFile() {
  ::unlink(path_.c_str());
  untrack_temporary_file(path_);
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
