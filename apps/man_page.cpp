#include "apps/man_page.hpp"

#include <CLI/CLI.hpp>
#include <sstream>
#include <vector>

#include "core/limits.hpp"

namespace hgsim::apps {
namespace {

// Text as roff prints it: a backslash is "\e", a '-' is "\-" (a minus, so that options can
// be copied and searched), and a line may not start with a control character ('.', '\'').
std::string roff(std::string_view text) {
  std::string out;
  bool line_start = true;
  for (const char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
    line_start = c == '\n';
  }
  return out;
}

// Every subcommand CLI11 knows, in the order they were added (hidden ones too: none is).
std::vector<const CLI::App*> subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// The options a reader can give: not --help, not in a hidden (empty) group.
std::vector<const CLI::Option*> visible_options(const CLI::App& command) {
  std::vector<const CLI::Option*> out;
  for (const CLI::Option* opt : command.get_options()) {
    if (opt == command.get_help_ptr() || opt == command.get_help_all_ptr()) continue;
    if (opt->get_group().empty()) continue;
    out.push_back(opt);
  }
  return out;
}

// "hgsim validate live": the command's name with its parents'.
std::string full_name(const CLI::App& command) {
  std::string name = command.get_name();
  for (const CLI::App* p = command.get_parent(); p != nullptr; p = p->get_parent())
    name = (p->get_parent() == nullptr ? std::string("hgsim") : p->get_name()) + " " + name;
  return name;
}

// How an option is written: "--plan FILE", "--json", "-j, --jobs N", "SCENARIO".
std::string option_syntax(const CLI::Option& opt) {
  if (opt.get_positional()) return "\\fI" + roff(opt.get_name(true)) + "\\fR";
  std::string names = "\\fB" + roff(opt.get_name(false, true)) + "\\fR";
  const std::string comma = "\\fR,\\fB";  // the names bold, the commas between them not
  for (auto at = names.find(','); at != std::string::npos; at = names.find(',', at + comma.size()))
    names.replace(at, 1, comma);
  if (opt.get_expected_min() > 0 || opt.get_type_size_max() > 0) {
    const std::string type = opt.get_type_name();
    if (!type.empty() && opt.get_expected_max() != 0) names += " \\fI" + roff(type) + "\\fR";
  }
  return names;
}

void write_command(std::ostringstream& page, const CLI::App& command) {
  std::string synopsis;
  for (const CLI::Option* opt : visible_options(command))
    if (opt->get_positional())
      synopsis += " " + std::string(opt->get_required() ? "" : "[") + "\\fI" +
                  roff(opt->get_name(true)) + "\\fR" + (opt->get_required() ? "" : "]");
  const auto subs = subcommands(command);
  if (!subs.empty()) synopsis += " \\fICOMMAND\\fR";
  if (command.get_allow_extras()) synopsis += " [\\fIARGUMENTS\\fR...]";
  page << ".SS \"" << roff(full_name(command)) << "\"\n";
  page << ".B " << roff(full_name(command)) << "\n"
       << synopsis.substr(synopsis.empty() ? 0 : 1)
       << (visible_options(command).empty() ? "" : " [\\fIOPTIONS\\fR]") << "\n.PP\n";
  page << roff(command.get_description()) << ".\n";
  for (const CLI::Option* opt : visible_options(command)) {
    page << ".TP\n" << option_syntax(*opt) << "\n" << roff(opt->get_description());
    if (opt->get_required() && !opt->get_positional()) page << " (required)";
    page << "\n";
  }
  for (const CLI::App* sub : subs) write_command(page, *sub);
}

}  // namespace

std::string man_page(const CLI::App& app, std::string_view version) {
  std::ostringstream page;
  page << ".\\\" hgsim(1), written by `hgsim --man` from the command line's definitions.\n"
       << ".TH HGSIM 1 \"\" \"hgsim " << roff(version) << "\" \"User Commands\"\n"
       << ".SH NAME\nhgsim \\- "
       << roff(app.get_description().substr(app.get_description().find(':') + 2))
       << "\n.SH SYNOPSIS\n.B hgsim\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n.br\n"
       << ".B hgsim\n\\fB\\-\\-help\\fR | \\fB\\-\\-version\\fR\n"
       << ".SH DESCRIPTION\n"
       << "hgsim plans and simulates the training of large models on heterogeneous GPU "
          "clusters joined by slow WAN links. A scenario (YAML) describes the model, the "
          "training batch, the clusters, the WAN and a plan (or strategy: auto for the "
          "planner's). \\fBhgsim check\\fR validates it, \\fBhgsim run\\fR simulates one "
          "iteration, \\fBhgsim plan\\fR searches a plan.\n"
       << ".PP\nEvery command prints data on standard output and problems on standard error, "
          "each as \\fIfile\\fR:\\fIline\\fR:\\fIcolumn\\fR: error: \\fIkey.path\\fR: what; hint. "
          "\\fB\\-\\-json\\fR prints data (or the diagnostics) as JSON.\n"
       << ".SH COMMANDS\n";
  for (const CLI::App* sub : subcommands(app)) write_command(page, *sub);
  page << ".SH EXIT STATUS\n"
       << ".TP\n0\nsuccess\n"
       << ".TP\n1\nbad input or usage: a wrong scenario, plan, trace or profile, a limit "
          "passed, output that could not be written\n"
       << ".TP\n2\nan internal error (a bug in hgsim)\n"
       << ".TP\n128 + N\nended by signal N (130 for Ctrl\\-C); the processes hgsim forked "
          "end with it\n"
       << ".SH ENVIRONMENT\nEach limit on input is an environment variable (a whole number; "
          "a value out of range is ignored with a warning):\n";
  for (const core::LimitVariable& v : core::limit_variables())
    page << ".TP\n.B " << roff(v.name) << "\n" << roff(v.meaning) << "\n";
  page << ".TP\n.B HGSIM_CUDA_MODULE\nthe CUDA module to load on the first call that needs a "
          "GPU (default: libhgsim_cuda.so beside hgsim, or in the build's lib/)\n"
       << ".SH FILES\n.TP\nscenarios/examples/\nthe scenario language by example\n"
       << ".TP\nkernels/profiles/\nmeasured op profiles, used by \\fBhgsim run\\fR by default\n"
       << ".SH SEE ALSO\nThe documentation in the source tree: README.md and docs/ "
          "(docs/cli.md: every command; docs/scenarios.md: the scenario language; "
          "docs/limits.md: the limits).\n";
  return page.str();
}

}  // namespace hgsim::apps
