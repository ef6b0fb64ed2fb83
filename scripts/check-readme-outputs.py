#!/usr/bin/env python3
"""Checks that the outputs the documentation quotes are what hgsim prints today, and that
its relative links lead somewhere.

Usage: check-readme-outputs.py [HGSIM] FILE|DIR... [--show] [--update]
FILE is a Markdown file (README.md, docs/cli.md); DIR stands for every *.md file in it.
Without HGSIM (the first argument, when it is not a .md file or a folder) only the links
and the sizes are checked. Every problem: one line 'check-readme-outputs.py: error: ...'
or 'FILE:LINE: ...', exit status 1.

Pinned outputs. A quoted output is pinned by an HTML comment right before its code block:

    <!-- pinned: hgsim run scenarios/examples/explicit-plan.yaml; exit 0; volatile: ^  search: -->
    ```
    ...what the command prints...
    ```

Fields after the command, separated by '; ':
  exit N         the exit status the command must end with (default 0);
  volatile: RE   block lines matching the regular expression RE stand for any one output
                 line (wall-clock times, which no run repeats).
In the block, a first line '$ hgsim ...' is the command as a reader types it (not compared);
a line that is only '...' stands for any number of output lines; '...' inside a line stands
for any text. Every other line must equal an output line (trailing spaces ignored), in
order, consecutive except across '...'. The command runs in a scratch directory that sees
the repository's scenarios/ (so files it writes land there), with 'hgsim' replaced by the
binary given; stdout and stderr are compared together, stderr first.

Links. Every Markdown link outside code blocks whose target is not a URL must name a file
or folder that exists, relative to the page; a '#anchor' (alone, or after a .md target)
must be a heading of that page, spelt as GitHub spells heading anchors (lower case,
punctuation but '-' and '_' dropped, spaces as '-').

Sizes. The top-level README.md stays under 15 KiB (what a newcomer reads first) and every
other page under 40 KiB (a page longer than that is several topics).

  --show    prints each command's output;
  --update  rewrites each quoted block that differs from today's output: every quoted line
            becomes the output line it stands for (found by the words it starts with, after
            a '...' again), keeping the '$ ' line, '...' lines and volatile lines. Read the
            diff: the prose around a block is not updated.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

import script_cli as cli

MARKER = re.compile(r"^<!-- pinned: (.*?) -->\s*$")


def parse(readme, name="README.md"):
    """[(line number of the marker, command, exit status, volatile RE or None, block lines)]."""
    lines = readme.splitlines()
    pins = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        fields = m.group(1).split("; ")
        command, status, volatile = fields[0], 0, None
        for f in fields[1:]:
            if f.startswith("exit "):
                try:
                    status = int(f[5:])
                except ValueError:
                    raise cli.ScriptError(f"{name}:{i + 1}: '{cli.quoted(f)}': the exit "
                                          "status is a whole number") from None
            elif f.startswith("volatile: "):
                try:
                    volatile = re.compile(f[len("volatile: "):])
                except re.error as e:
                    raise cli.ScriptError(f"{name}:{i + 1}: volatile: not a regular "
                                          f"expression ({e})") from None
            else:
                raise cli.ScriptError(f"{name}:{i + 1}: unknown field '{cli.quoted(f)}' in "
                                      "the pinned marker")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise cli.ScriptError(f"{name}:{i + 1}: a pinned marker must be followed by a "
                                  "``` block")
        block = []
        j = i + 2
        while j < len(lines) and not lines[j].startswith("```"):
            block.append(lines[j])
            j += 1
        if j == len(lines):
            raise cli.ScriptError(f"{name}:{i + 2}: the pinned block is never closed")
        if block and block[0].startswith("$ "):
            block = block[1:]
        pins.append((i + 1, command, status, volatile, block))
    return pins


def line_matches(want, have, volatile):
    if volatile is not None and volatile.search(want):
        return True
    have = have.rstrip()
    want = want.rstrip()
    if "..." not in want:
        return want == have
    pattern = ".*".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, have) is not None


def match(block, output, volatile):
    """None when the block matches the output, else the quoted line it fails at (the
    furthest any alignment got)."""
    out = output.splitlines()
    furthest = [0]

    def fits(b, o):
        while b < len(block):
            if block[b].strip() == "...":
                return any(fits(b + 1, k) for k in range(o, len(out) + 1))
            if o >= len(out) or not line_matches(block[b], out[o], volatile):
                furthest[0] = max(furthest[0], b)
                return False
            b += 1
            o += 1
        return True

    # The quoted lines may start anywhere in the output.
    if any(fits(0, start) for start in range(len(out) + 1)):
        return None
    return block[furthest[0]]


def key(line):
    """The words a line starts with: what finds it again in a changed output."""
    return " ".join(line.split()[:2])


def updated(block, output, volatile):
    """The block with each quoted line replaced by the output line it stands for (found
    again by its first words; output lines that appeared between two consecutive quoted
    lines are taken in too), or None when a quoted line after a '...' is not found."""
    out = output.splitlines()
    new, o = [], 0
    after_gap = True
    for line in block:
        if line.strip() == "...":
            new.append(line)
            after_gap = True
            continue
        if volatile is not None and volatile.search(line):
            new.append(line)
            o += 1
            continue
        found = next((k for k in range(o, len(out)) if key(out[k]) == key(line)), None)
        if found is None:
            if after_gap:
                return None
            found = o  # the line changed its first words: the one at its place stands for it
        if found >= len(out):
            return None
        if not after_gap:
            new.extend(extra.rstrip() for extra in out[o:found])
        new.append(out[found].rstrip())
        o, after_gap = found + 1, False
    return new


MAX_README_BYTES = 15 * 1024
MAX_PAGE_BYTES = 40 * 1024
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)\)")


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"^#+\s+", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(text):
    """(line number, line) of every line outside ``` blocks."""
    inside = False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield i + 1, line


def anchors_of(text):
    seen, out = {}, set()
    for _, line in prose_lines(text):
        if re.match(r"^#{1,6}\s", line):
            a = slug(line)
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def check_links(path, text, name):
    problems = []
    here = os.path.dirname(os.path.abspath(path))
    cache = {}
    for number, line in prose_lines(text):
        # inline code is not a link
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(here, file_part)) if file_part else \
                os.path.abspath(path)
            where = f"{name}:{number}: the link '{cli.quoted(target)}'"
            if not os.path.exists(dest):
                problems.append(f"{where} names no file")
                continue
            if anchor and dest.endswith(".md"):
                if dest not in cache:
                    with open(dest, encoding="utf-8") as f:
                        cache[dest] = anchors_of(f.read())
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading of {os.path.basename(dest)} has "
                                    f"the anchor '#{cli.quoted(anchor)}'")
    return problems


def check_pins(hgsim, path, text, name, show, update):
    """(problems, the file's new text or None)."""
    root = repository_root(path)
    pins = parse(text, name)
    problems, updates = [], {}
    for line, command, status, volatile, block in pins:
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise cli.ScriptError(f"{name}:{line}: the pinned command: {e}") from None
        if not argv or argv[0] != "hgsim":
            raise cli.ScriptError(f"{name}:{line}: a pinned command must start with hgsim")
        with tempfile.TemporaryDirectory(prefix="hgsim-readme-") as scratch:
            os.symlink(os.path.join(root, "scenarios"), os.path.join(scratch, "scenarios"))
            try:
                r = subprocess.run([hgsim] + argv[1:], cwd=scratch, capture_output=True,
                                   text=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise cli.ScriptError(f"{name}:{line}: {command}: still running after "
                                      "600 s") from None
        output = r.stderr + r.stdout
        if show:
            print(f"==== {name}:{line}: {command} (exit {r.returncode})\n{output}")
        wrong = []
        if r.returncode != status:
            wrong.append(f"exited {r.returncode}, the page says {status}")
        miss = match(block, output, volatile)
        if miss is not None:
            wrong.append(f"the quoted line\n    {miss}\n  is not in the output (in order)")
        if wrong and update and miss is not None:
            new = updated(block, output, volatile)
            if new is not None:
                updates[line] = new
        if wrong:
            problems.append(f"{name}:{line}: {command}: " + "; ".join(wrong) +
                            "\n  the output:\n" +
                            "\n".join("    " + l for l in output.splitlines()))
        else:
            print(f"{name}:{line}: {command}: the quoted output matches ({len(block)} lines)")
    if not updates:
        return problems, len(pins), None
    lines = text.split("\n")
    for marker in sorted(updates, reverse=True):
        start = marker  # the ``` line, 0-based (the marker is its 1-based line number)
        end = start + 1
        while not lines[end].startswith("```"):
            end += 1
        keep = [lines[start + 1]] if lines[start + 1].startswith("$ ") else []
        lines[start + 1:end] = keep + updates[marker]
    return problems, len(pins), "\n".join(lines)


def repository_root(path):
    """The folder holding scenarios/: the page's own, or one above it (docs/)."""
    d = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(os.path.join(d, "scenarios")) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return d


def pages(args):
    out = []
    for a in args:
        if os.path.isdir(a):
            out += sorted(os.path.join(a, f) for f in os.listdir(a) if f.endswith(".md"))
        else:
            out.append(cli.input_file(a, "FILE"))
    return out


def main():
    parser = cli.Parser(description="Checks that the outputs the documentation quotes are "
                        "what hgsim prints today, and that its relative links lead "
                        "somewhere.")
    parser.add_argument("paths", nargs="+", metavar="[HGSIM] FILE|DIR",
                        help="the hgsim binary (optional), then Markdown files or folders")
    parser.add_argument("--show", action="store_true", help="print each command's output")
    parser.add_argument("--update", action="store_true",
                        help="rewrite each quoted block that differs from today's output")
    args = parser.parse_args()
    paths, hgsim = args.paths, None
    if not paths[0].endswith(".md") and not os.path.isdir(paths[0]):
        hgsim = os.path.abspath(cli.executable(paths[0], "HGSIM"))
        paths = paths[1:]
    if not paths:
        raise cli.ScriptError("no Markdown file or folder given")
    if args.update and hgsim is None:
        raise cli.ScriptError("--update needs the hgsim binary (the first argument)")
    files = pages(paths)
    if not files:
        raise cli.ScriptError("no Markdown files in " + ", ".join(map(cli.quoted, paths)))
    problems, pinned, rewritten = [], 0, []
    for path in files:
        name = os.path.relpath(path)
        if args.update:
            cli.output_file(path, "FILE")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise cli.ScriptError(f"{cli.quoted(path)}: not UTF-8 text (byte {e.start})")
        size = len(text.encode("utf-8"))
        top = os.path.basename(path) == "README.md" and \
            os.path.isdir(os.path.join(os.path.dirname(os.path.abspath(path)), "scenarios"))
        limit = MAX_README_BYTES if top else MAX_PAGE_BYTES
        if size > limit:
            problems.append(f"{name}: {size} bytes, over the {limit} a page may have")
        problems += check_links(path, text, name)
        if hgsim is not None:
            wrong, n, new = check_pins(hgsim, path, text, name, args.show, args.update)
            problems += wrong
            pinned += n
            if new is not None:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                rewritten.append(name)
    for p in problems:
        print(p)
    for name in rewritten:
        print(f"updated quoted blocks in {name}: read the diff")
    if hgsim is not None and pinned == 0:
        raise cli.ScriptError("no pinned outputs found in " + ", ".join(map(cli.quoted, paths)))
    if problems:
        raise cli.ScriptError(f"{len(problems)} problem(s) in the documentation (run with "
                              "--show to see the outputs, --update to rewrite the quoted "
                              "blocks)")
    print(f"{len(files)} pages: {pinned} pinned outputs and every relative link checked")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
