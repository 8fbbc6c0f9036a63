#!/usr/bin/env python3
"""Writes the man pages keyauth(1) and keyauth-server(8) from the built binaries' --help.

    python3 scripts/make-manpages.py BIN_DIR OUT_DIR

Runs BIN_DIR/keyauth --help, `keyauth COMMAND --help` for every command that page lists, and
BIN_DIR/keyauth-server --help, and turns them into roff (the man macros): NAME, SYNOPSIS and
OPTIONS come from the help text, COMMANDS too for keyauth, so a page always says what --help
says. The sections --help does not have (more DESCRIPTION, COMMANDS of keyauth-server,
ENVIRONMENT, FILES, EXIT STATUS, EXAMPLES, SEE ALSO) are roff snippets in
packaging/man/PAGE.SECTION/NAME.roff. keyauth-server's ENVIRONMENT also lists every
[KEYAUTH_SERVER_...] variable its options name.

The date is the release's in CHANGELOG.md ("## VERSION - YYYY-MM-DD"), or the last commit's,
so that building twice gives the same pages.

How help text is read: blocks are separated by blank lines. A block starting "usage:" is the
synopsis. A block whose lines are "TERM  description" in two columns (an optional "header:" line
above them, continuation lines indented to the description column) is a list. Anything else is
a paragraph.
"""

import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNIPPETS = os.path.join(ROOT, "packaging", "man")


def run_help(binary, *arguments):
    """The standard output of `binary arguments...`, which must exit 0."""
    result = subprocess.run([binary, *arguments], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"make-manpages: {' '.join([binary, *arguments])} exited {result.returncode}: {result.stderr}")
    return result.stdout


# ---- Reading help text ----------------------------------------------------------------------

Usage = collections.namedtuple("Usage", "lines")
Paragraph = collections.namedtuple("Paragraph", "lines")
DefinitionList = collections.namedtuple("DefinitionList", "header entries")  # entries: [(term, [lines])]


def blocks(text):
    """The help text's blocks, each a list of lines without trailing spaces."""
    current = []
    for line in text.splitlines():
        line = line.rstrip()
        if line:
            current.append(line)
        elif current:
            yield current
            current = []
    if current:
        yield current


def indentation(line):
    return len(line) - len(line.lstrip(" "))


def parse_list(lines):
    """The entries of a two-column list, or None when the lines are not one.

    The description column is where most first lines continue after a gap of two or more
    spaces; a term as long as the column may be followed by one space only, and a term longer
    than that stands alone with its description on the next lines.
    """
    base = indentation(lines[0])
    columns = collections.Counter()
    for line in lines:
        if indentation(line) == base:
            match = re.match(r"( *\S.*?) {2,}(\S)", line)
            if match:
                columns[match.start(2)] += 1
    if not columns:
        return None
    column = columns.most_common(1)[0][0]
    entries = []
    for line in lines:
        depth = indentation(line)
        if depth == base:
            if len(line) > column and line[column - 1] == " " and line[column] != " ":
                term, text = line[:column].strip(), line[column:].strip()
            elif len(line) <= column or " " * 2 not in line.strip():
                term, text = line.strip(), None
            else:
                return None
            entries.append((term, [text] if text else []))
        elif depth == column and entries:
            entries[-1][1].append(line.strip())
        else:
            return None
    return entries


def read_help(text):
    """The help text as a list of Usage, Paragraph and DefinitionList."""
    result = []
    for block in blocks(text):
        if block[0].startswith("usage:"):
            result.append(Usage([re.sub(r"^(usage:)? +", "", line) for line in block]))
            continue
        header = None
        body = block
        if len(block) > 1 and block[0].endswith(":") and indentation(block[0]) == 0 and indentation(block[1]) > 0:
            header, body = block[0][:-1], block[1:]
        entries = parse_list(body)
        if entries is not None:
            result.append(DefinitionList(header, entries))
        else:
            result.append(Paragraph(block))
    return result


# ---- Writing roff ---------------------------------------------------------------------------


def escape(text):
    """Text for roff: backslashes and hyphens escaped, `code` in bold."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)


def capitalized(text):
    return text[:1].upper() + text[1:]


def line_safe(text):
    """A line roff does not read as a request."""
    return "\\&" + text if text[:1] in (".", "'") else text


def styled(text):
    """A synopsis line or list term: options and command words in bold, placeholders (upper
    case, <in angle brackets>, `options`, and the values after an option) in italics."""
    out = []
    in_angle = False  # inside <...>
    value_expected = False  # the next word is an option's value
    alternatives = False  # a value was just written, so a | continues the value
    for token in re.split(r"(\s+|[\[\]|<>,])", text):
        if not token:
            continue
        if token.isspace():
            alternatives = False
            out.append(token)
        elif token in "<>":
            in_angle = token == "<"
            out.append(escape(token))
        elif token == "|":
            value_expected = alternatives
            out.append(token)
        elif token in "[],":
            value_expected = alternatives = False
            out.append(token)
        elif token.startswith("-"):
            value_expected, alternatives = True, False
            out.append("\\fB" + escape(token) + "\\fR")
        elif in_angle or value_expected or token == "options" or not re.fullmatch(r"[a-z][a-z0-9-]*", token):
            alternatives, value_expected = value_expected, False
            out.append("\\fI" + escape(token) + "\\fR")
        else:
            out.append("\\fB" + escape(token) + "\\fR")
    return "".join(out)


def paragraph(lines):
    return [".PP"] + [line_safe(escape(line.strip())) for line in lines]


def definition_list(entries):
    out = []
    for term, text in entries:
        out += [".TP", line_safe(styled(term))]
        out += [line_safe(escape(line)) for line in text]
    return out


def synopsis(usage_lines):
    out = []
    for line in usage_lines:
        out += [".PP" if not out else ".br", line_safe(styled(line))]
    return out


def snippet(page, name):
    """The roff lines of packaging/man/PAGE/NAME.roff, or [] when there is none."""
    path = os.path.join(SNIPPETS, page, name + ".roff")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\n") for line in file if not line.startswith('.\\"')]


def section(title, body):
    return [f".SH {title}"] + body if body else []


def header(name, number, title, version, date):
    return [
        f'.\\" Generated by scripts/make-manpages.py from {name} --help and packaging/man/{name}.{number}/;',
        '.\\" edit those, not this file.',
        f'.TH {escape(name.upper())} {number} {date} "{escape(name)} {version}" "{title}"',
        ".nh",
        ".ad l",
    ]


def name_line(name, help_blocks):
    """NAME: the program and the first sentence of its help, in lower case."""
    first = next(block for block in help_blocks if isinstance(block, Paragraph))
    summary = " ".join(line.strip() for line in first.lines).rstrip(".")
    summary = summary[:1].lower() + summary[1:]
    return [".SH NAME", f"{escape(name)} \\- {escape(summary)}"]


def options_section(help_blocks):
    out = []
    for block in help_blocks:
        if isinstance(block, DefinitionList) and block.header and "options" in block.header:
            if block.header != "options":
                out += [".PP", escape(capitalized(block.header)) + ":"]
            out += definition_list(block.entries)
    return out


def remaining_paragraphs(help_blocks):
    """Every paragraph after the first: notes that --help gives after its lists."""
    paragraphs = [block for block in help_blocks if isinstance(block, Paragraph)]
    return [line for block in paragraphs[1:] for line in paragraph(block.lines)]


def environment_from_options(help_blocks):
    """One entry for every [KEYAUTH_...] variable an option names, with the option."""
    out = []
    for block in help_blocks:
        if not isinstance(block, DefinitionList):
            continue
        for term, text in block.entries:
            for variable in re.findall(r"\[(KEYAUTH_[A-Z_]+)(=1)?\]", " ".join(text)):
                flag = term.split()[0]
                value = " (1 for on)" if variable[1] else ""
                out += [".TP", f"\\fB{escape(variable[0])}\\fR", f"as \\fB{escape(flag)}\\fR{value}"]
    return out


def keyauth_commands(binary, overview):
    """COMMANDS of keyauth(1): one subsection per command of the overview's list, made of the
    one-line summary there and the command's own --help page."""
    commands_list = next(
        block for block in overview if isinstance(block, DefinitionList) and block.header == "commands"
    )
    out = []
    for command, summary in commands_list.entries:
        out += [f".SS {escape(command)}", line_safe(escape(capitalized(" ".join(summary)))) + "."]
        for block in read_help(run_help(binary, command, "--help")):
            if isinstance(block, Usage):
                out += synopsis(block.lines)
            elif isinstance(block, Paragraph):
                out += paragraph(block.lines)
            else:
                if block.header:
                    out += [".PP", escape(capitalized(block.header)) + ":"]
                out += definition_list(block.entries)
    return out


def manual_page(name, number, title, help_blocks, commands, environment, version, date):
    """The whole page: what --help says, with the snippets of packaging/man/NAME.NUMBER/."""
    page = f"{name}.{number}"
    usage = next(block for block in help_blocks if isinstance(block, Usage))
    first = next(block for block in help_blocks if isinstance(block, Paragraph))
    description = paragraph(first.lines) + snippet(page, "description") + remaining_paragraphs(help_blocks)
    lines = header(name, number, title, version, date) + name_line(name, help_blocks)
    lines += section("SYNOPSIS", synopsis(usage.lines))
    lines += section("DESCRIPTION", description)
    lines += section("COMMANDS", commands + snippet(page, "commands"))
    lines += section("OPTIONS", options_section(help_blocks))
    lines += section("ENVIRONMENT", environment + snippet(page, "environment"))
    for title_text, snippet_name in (
        ("FILES", "files"), ("EXIT STATUS", "exit-status"), ("EXAMPLES", "examples"), ("SEE ALSO", "see-also")
    ):
        lines += section(title_text, snippet(page, snippet_name))
    return lines


def keyauth_page(binary_dir, version, date):
    binary = os.path.join(binary_dir, "keyauth")
    overview = read_help(run_help(binary, "--help"))
    commands = keyauth_commands(binary, overview)
    return manual_page("keyauth", 1, "User Commands", overview, commands, [], version, date)


def server_page(binary_dir, version, date):
    help_blocks = read_help(run_help(os.path.join(binary_dir, "keyauth-server"), "--help"))
    environment = environment_from_options(help_blocks)
    return manual_page("keyauth-server", 8, "System Manager's Manual", help_blocks, [], environment, version, date)


def release_date(version):
    """The date of VERSION in CHANGELOG.md, else of the last commit."""
    changelog = os.path.join(ROOT, "CHANGELOG.md")
    if os.path.exists(changelog):
        with open(changelog, encoding="utf-8") as file:
            for line in file:
                match = re.match(r"## " + re.escape(version) + r" - (\d{4}-\d{2}-\d{2})\s*$", line)
                if match:
                    return match.group(1)
    result = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%cs"], capture_output=True, text=True)
    if result.returncode == 0 and result.stdout.strip():
        return result.stdout.strip()
    sys.exit(f"make-manpages: no date for {version} in CHANGELOG.md and no git history")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make-manpages.py BIN_DIR OUT_DIR")
    binary_dir, out_dir = sys.argv[1], sys.argv[2]
    version = run_help(os.path.join(binary_dir, "keyauth"), "--version").split()[-1]
    date = release_date(version)
    os.makedirs(out_dir, exist_ok=True)
    for name, lines in (
        ("keyauth.1", keyauth_page(binary_dir, version, date)),
        ("keyauth-server.8", server_page(binary_dir, version, date)),
    ):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
