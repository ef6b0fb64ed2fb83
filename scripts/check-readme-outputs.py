#!/usr/bin/env python3
"""Checks that the outputs the README quotes are what hgsim prints today.

A quoted output is pinned by an HTML comment right before its code block:

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

Usage: check-readme-outputs.py HGSIM README.md [--show] [--update]
(every problem: one line 'check-readme-outputs.py: error: ...', exit status 1)
  --show    prints each command's output;
  --update  rewrites each quoted block that differs from today's output in README.md: every
            quoted line becomes the output line it stands for (found by the words it starts
            with, after a '...' again), keeping the '$ ' line, '...' lines and volatile lines.
            Read the diff: the prose around a block is not updated.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

import script_cli as cli

MARKER = re.compile(r"^<!-- pinned: (.*?) -->\s*$")


def parse(readme):
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
                    raise cli.ScriptError(f"README.md:{i + 1}: '{cli.quoted(f)}': the exit "
                                          "status is a whole number") from None
            elif f.startswith("volatile: "):
                try:
                    volatile = re.compile(f[len("volatile: "):])
                except re.error as e:
                    raise cli.ScriptError(f"README.md:{i + 1}: volatile: not a regular "
                                          f"expression ({e})") from None
            else:
                raise cli.ScriptError(f"README.md:{i + 1}: unknown field '{cli.quoted(f)}' in "
                                      "the pinned marker")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise cli.ScriptError(f"README.md:{i + 1}: a pinned marker must be followed by a "
                                  "``` block")
        block = []
        j = i + 2
        while j < len(lines) and not lines[j].startswith("```"):
            block.append(lines[j])
            j += 1
        if j == len(lines):
            raise cli.ScriptError(f"README.md:{i + 2}: the pinned block is never closed")
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
    """The block with each quoted line replaced by the output line it stands for, or None
    when a quoted line's words are not found."""
    out = output.splitlines()
    new, o = [], 0
    realign = True
    for line in block:
        if line.strip() == "..." or (volatile is not None and volatile.search(line)):
            new.append(line)
            realign = line.strip() == "..." or realign
            o += 0 if line.strip() == "..." else 1
            continue
        if realign:
            found = next((k for k in range(o, len(out)) if key(out[k]) == key(line)), None)
            if found is None:
                return None
            o, realign = found, False
        if o >= len(out):
            return None
        new.append(out[o].rstrip())
        o += 1
    return new


def main():
    parser = cli.Parser(description="Checks that the outputs the README quotes are what "
                        "hgsim prints today.")
    parser.add_argument("hgsim", help="the hgsim binary")
    parser.add_argument("readme", help="README.md")
    parser.add_argument("--show", action="store_true", help="print each command's output")
    parser.add_argument("--update", action="store_true",
                        help="rewrite each quoted block that differs from today's output")
    args = parser.parse_args()
    hgsim = os.path.abspath(cli.executable(args.hgsim, "HGSIM"))
    readme_path = cli.input_file(args.readme, "README")
    if args.update:
        cli.output_file(readme_path, "README")
    show, update = args.show, args.update
    updates = {}  # marker line -> the block's new lines
    root = os.path.dirname(os.path.abspath(readme_path))
    try:
        with open(readme_path, encoding="utf-8") as f:
            pins = parse(f.read())
    except UnicodeDecodeError as e:
        raise cli.ScriptError(f"{cli.quoted(readme_path)}: not UTF-8 text (byte {e.start})")
    if not pins:
        raise cli.ScriptError(f"{cli.quoted(readme_path)}: no pinned outputs found")
    failures = 0
    for line, command, status, volatile, block in pins:
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise cli.ScriptError(f"README.md:{line}: the pinned command: {e}") from None
        if not argv or argv[0] != "hgsim":
            raise cli.ScriptError(f"README.md:{line}: a pinned command must start with hgsim")
        with tempfile.TemporaryDirectory(prefix="hgsim-readme-") as scratch:
            os.symlink(os.path.join(root, "scenarios"), os.path.join(scratch, "scenarios"))
            try:
                r = subprocess.run([hgsim] + argv[1:], cwd=scratch, capture_output=True,
                                   text=True, timeout=600)
            except subprocess.TimeoutExpired:
                raise cli.ScriptError(f"README.md:{line}: {command}: still running after "
                                      "600 s") from None
        output = r.stderr + r.stdout
        if show:
            print(f"==== README.md:{line}: {command} (exit {r.returncode})\n{output}")
        problems = []
        if r.returncode != status:
            problems.append(f"exited {r.returncode}, the README says {status}")
        miss = match(block, output, volatile)
        if miss is not None:
            problems.append(f"the quoted line\n    {miss}\n  is not in the output (in order)")
        if problems and update and miss is not None:
            new = updated(block, output, volatile)
            if new is not None:
                updates[line] = new
        if problems:
            failures += 1
            print(f"README.md:{line}: {command}: " + "; ".join(problems))
            print("  the output:\n" + "\n".join("    " + l for l in output.splitlines()))
        else:
            print(f"README.md:{line}: {command}: the quoted output matches ({len(block)} lines)")
    if updates:
        with open(readme_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for marker in sorted(updates, reverse=True):
            start = marker  # the ``` line, 0-based (the marker is its 1-based line number)
            end = start + 1
            while not lines[end].startswith("```"):
                end += 1
            keep = [lines[start + 1]] if lines[start + 1].startswith("$ ") else []
            lines[start + 1:end] = keep + updates[marker]
        with open(readme_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"updated {len(updates)} quoted block(s) in {readme_path}: read the diff")
    if failures:
        raise cli.ScriptError(f"{failures} of {len(pins)} pinned outputs differ from what "
                              "hgsim prints; update the README (run with --show to see the "
                              "outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
