#include "core/text.hpp"

#include <algorithm>

namespace hgsim::core {

namespace {

unsigned byte_at(std::string_view text, std::size_t k) {
  return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u;
}

// The length of the UTF-8 sequence that starts at text[i], 0 when none does (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF).
std::size_t sequence_length(std::string_view text, std::size_t i) {
  const unsigned c = byte_at(text, i);
  auto continuation = [&](std::size_t k, unsigned low = 0x80, unsigned high = 0xBF) {
    const unsigned b = byte_at(text, i + k);
    return b >= low && b <= high;
  };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return continuation(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
    return continuation(1, low, high) && continuation(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
    return continuation(1, low, high) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

// Appends the character at text[i] as a terminal should show it, and advances i to its
// last byte: C0 controls, DEL and bytes that are not UTF-8 as \xNN; C1 controls
// (U+0080-U+009F) and the bidirectional and line-separator marks (U+200E/F, U+2028/9,
// U+202A-E, U+2066-9: text that reads in another order than it runs) as \uNNNN; any other
// character as it is.
void append_shown(std::string_view text, std::size_t& i, std::string& out) {
  static const char* hex = "0123456789abcdef";
  const unsigned c = byte_at(text, i);
  auto u = [&](unsigned cp) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(cp >> shift) & 15];
  };
  const std::size_t length = sequence_length(text, i);
  if (c < 0x20 || c == 0x7F || length == 0) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
    return;
  }
  unsigned cp = c;
  if (length == 2) cp = ((c & 0x1F) << 6) | (byte_at(text, i + 1) & 0x3F);
  if (length == 3)
    cp = ((c & 0x0F) << 12) | ((byte_at(text, i + 1) & 0x3F) << 6) | (byte_at(text, i + 2) & 0x3F);
  if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F || cp == 0x2028 || cp == 0x2029 ||
      (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069))
    u(cp);
  else
    out.append(text.substr(i, length));
  i += length - 1;
}

}  // namespace

std::string escaped(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) append_shown(text, i, out);
  return out;
}

std::string excerpt(std::string_view text) {
  constexpr std::size_t kShown = 60;  // characters (code points), not bytes
  std::string out;
  std::size_t i = 0;
  // A character is shown whole or not at all: the cut is never inside a UTF-8 sequence.
  for (std::size_t shown = 0; i < text.size() && shown < kShown; ++i, ++shown)
    append_shown(text, i, out);
  if (i < text.size()) out += "... (" + std::to_string(utf8_length(text)) + " characters)";
  return out;
}

std::string ends_excerpt(std::string_view text, std::size_t head, std::size_t tail) {
  const std::size_t length = utf8_length(text);
  if (length <= head + tail) return escaped(text);
  std::string first, last;
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size(); ++i, ++n) {
    if (n < head)
      append_shown(text, i, first);
    else if (n >= length - tail)
      append_shown(text, i, last);
    else
      i += std::max<std::size_t>(sequence_length(text, i), 1) - 1;
  }
  return first + "..." + last;
}

std::string path_excerpt(std::string_view path) {
  constexpr std::size_t kWhole = 200, kHead = 60, kTail = 100;  // characters
  const std::size_t length = utf8_length(path);
  if (length <= kWhole) return escaped(path);
  return ends_excerpt(path, kHead, kTail) + " (" + std::to_string(length) + " characters)";
}

std::size_t utf8_length(std::string_view text) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size(); ++n) {
    const std::size_t length = sequence_length(text, i);
    i += length == 0 ? 1 : length;
  }
  return n;
}

}  // namespace hgsim::core
