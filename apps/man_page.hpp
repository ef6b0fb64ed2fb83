// hgsim(1): the manual page, written from the command line's own CLI11 definitions (every
// subcommand, its arguments and options, their descriptions), so that it cannot drift from
// `hgsim --help`. The build runs `hgsim --man` to write build/<preset>/man/hgsim.1, and
// `cmake --install` puts it in share/man/man1.
#pragma once

#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace hgsim::apps {

// The page in roff (man(7) macros): NAME, SYNOPSIS, DESCRIPTION, one subsection per command
// with its arguments and options, EXIT STATUS, ENVIRONMENT, FILES, SEE ALSO.
std::string man_page(const CLI::App& app, std::string_view version);

}  // namespace hgsim::apps
