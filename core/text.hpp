// The quoting rule for every message that repeats what a user wrote (a value, a name, a
// path, a flag), C++ and Python alike: escaped so that a terminal shows it rather than
// acts on it, and cut so that one message stays one readable line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hgsim::core {

// At most 60 characters (code points) of `text`, escaped as `escaped` does, with its length
// in characters when cut: what a message may quote of the user's input (Python's
// hgsim.plots quotes through it too).
std::string excerpt(std::string_view text);
// `text` with every character a terminal would act on escaped: C0 controls, DEL and bytes
// that are not UTF-8 as \xNN, C1 controls and the bidirectional and line-separator marks as
// \uNNNN.
std::string escaped(std::string_view text);
// `text` escaped as `escaped` does; when longer than `head` + `tail` characters, only its
// first `head` and last `tail`, joined by "...".
std::string ends_excerpt(std::string_view text, std::size_t head, std::size_t tail);

// A path as a message shows it: escaped as `escaped` does, and past 200 characters cut to its
// first 60 and last 100 (where the file's name is) with its length. A real path is seldom
// that long; a 100 kB argument is not a path anyone wants to read back.
std::string path_excerpt(std::string_view path);

// Characters of UTF-8 `text`, counted as code points (what a limit stated "in characters"
// counts: 150 'é' are 150 characters, 300 bytes). A byte that does not start a sequence
// (not UTF-8) counts as one, as escaped() shows it.
std::size_t utf8_length(std::string_view text);

}  // namespace hgsim::core
