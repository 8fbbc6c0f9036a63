#!/usr/bin/env python3
"""Writes Sources/KeyAuth/Wire/UnicodeScriptTable.swift from the Unicode Character Database.

    python3 scripts/make-script-table.py [UCD_DIR]

UCD_DIR holds Scripts.txt, ScriptExtensions.txt and PropertyValueAliases.txt of one Unicode
version; the default is /usr/share/unicode, where Debian's unicode-data package puts them
(`apt-get install unicode-data`). The table is checked in, so a build needs none of this; run
the script again when the data should follow a newer Unicode version, and say so in
docs/PROTOCOL.md (the name rule refuses characters newer than the table).

Why a table of our own: the name rule (InputRules, PROTOCOL.md section 4) refuses names that
mix scripts, as Unicode Technical Standard #39 section 5 describes, and Swift's
Unicode.Scalar.Properties does not expose the Script or Script_Extensions properties.

What is written, kept small because a name check reads it a few dozen times:
- the long names of the scripts that have characters, numbered (Common 0, Inherited 1);
- Script as a sorted list of runs, each `first code point << 8 | script number`. A run lasts
  until the next one starts, so code points unassigned in this version take the script of the
  run before them: the rule refuses those before it asks for their script;
- Script_Extensions the same way, with `set number + 1` (0 for code points without the
  property, whose extensions are their script), and the sets as lists of script numbers.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "Sources", "KeyAuth", "Wire", "UnicodeScriptTable.swift")
LINE_LENGTH = 120
INDENT = "        "
# Scripts the rule names in its code: the augmented sets and restriction levels of UTS #39.
NAMED = ["Common", "Inherited", "Latin", "Han", "Hiragana", "Katakana", "Bopomofo", "Hangul"]


def data_lines(path):
    """(code point range, value, version line) of each data line of a UCD file."""
    with open(path, encoding="utf-8") as file:
        for line in file:
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            points, value = (field.strip() for field in text.split(";", 1))
            first, _, last = points.partition("..")
            yield int(first, 16), int(last or first, 16), value


def version(path):
    """The Unicode version in a UCD file's first line, such as "15.0.0" from "# Scripts-15.0.0.txt"."""
    with open(path, encoding="utf-8") as file:
        match = re.match(r"# \w+-(\d+\.\d+\.\d+)\.txt", file.readline())
    if not match:
        sys.exit(f"make-script-table: {path} does not start with a version line")
    return match.group(1)


def script_aliases(path):
    """Short script names (Latn) to long ones (Latin), from PropertyValueAliases.txt."""
    aliases = {}
    with open(path, encoding="utf-8") as file:
        for line in file:
            fields = [field.strip() for field in line.split("#", 1)[0].split(";")]
            if len(fields) >= 3 and fields[0] == "sc":
                aliases[fields[1]] = fields[2]
                aliases[fields[2]] = fields[2]
    return aliases


def swift_array(name, kind, items, doc):
    """A `static let` array literal, elements packed as swift-format packs them."""
    lines = [f"    /// {line}".rstrip() for line in doc]
    lines.append(f"    static let {name}: [{kind}] = [")
    current = ""
    for item in items:
        piece = f"{item},"
        if current and len(INDENT) + len(current) + 1 + len(piece) > LINE_LENGTH:
            lines.append(INDENT + current)
            current = piece
        else:
            current = f"{current} {piece}" if current else piece
    if current:
        lines.append(INDENT + current)
    lines.append("    ]")
    return lines


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    scripts_path = os.path.join(directory, "Scripts.txt")
    extensions_path = os.path.join(directory, "ScriptExtensions.txt")
    aliases = script_aliases(os.path.join(directory, "PropertyValueAliases.txt"))
    unicode_version = version(scripts_path)
    if version(extensions_path) != unicode_version:
        sys.exit("make-script-table: Scripts.txt and ScriptExtensions.txt are of different versions")

    script_ranges = [(first, last, aliases[value]) for first, last, value in data_lines(scripts_path)]
    used = sorted({value for _, _, value in script_ranges} - set(NAMED))
    names = NAMED + used
    number = {name: index for index, name in enumerate(names)}
    if len(names) > 255:
        sys.exit("make-script-table: more than 255 scripts do not fit in a byte")

    script_runs = []
    for first, _, value in sorted(script_ranges):
        if not script_runs or script_runs[-1][1] != number[value]:
            script_runs.append((first, number[value]))
    # The first run starts at 0 (U+0000 is Common), so every code point falls in a run.
    if script_runs[0][0] != 0:
        sys.exit("make-script-table: Scripts.txt does not start at U+0000")

    sets = []
    extension_runs = [(0, 0)]
    end = 0
    for first, last, value in sorted(data_lines(extensions_path)):
        members = tuple(sorted(number[aliases[short]] for short in value.split()))
        if members not in sets:
            sets.append(members)
        index = sets.index(members) + 1
        if first > end and extension_runs[-1][1] != 0:
            extension_runs.append((end, 0))
        if extension_runs[-1][1] != index:
            extension_runs.append((first, index))
        end = last + 1
    extension_runs.append((end, 0))
    if len(sets) > 255:
        sys.exit("make-script-table: more than 255 extension sets do not fit in a byte")

    out = [
        f"// Generated by scripts/make-script-table.py from the Unicode Character Database {unicode_version}",
        "// (Scripts.txt, ScriptExtensions.txt, PropertyValueAliases.txt). Do not edit; run the script.",
        "",
        "/// The Script and Script_Extensions properties of Unicode, which the name rule needs to refuse",
        "/// names that mix scripts (UTS #39 section 5) and Swift does not expose.",
        "enum UnicodeScriptTable {",
        "    /// The Unicode version of the data: characters assigned later have no script here.",
        f"    static let version = (major: {unicode_version.split('.')[0]}, minor: {unicode_version.split('.')[1]})",
        "",
    ]
    for name in NAMED:
        constant = name[0].lower() + name[1:]
        out.append(f"    /// The number of the {name} script.")
        out.append(f"    static let {constant}: UInt8 = {number[name]}")
    out.append("")
    out += swift_array(
        "names", "String", [f'"{name.replace("_", " ")}"' for name in names],
        ["The long names of the scripts, with spaces for underscores, indexed by script number."])
    out.append("")
    out += swift_array(
        "scriptRuns", "UInt32", [f"0x{first << 8 | value:08X}" for first, value in script_runs],
        [
            "Script: `first code point << 8 | script number`, sorted; a run lasts until the next one",
            "starts, so an unassigned code point gets the script of the run before it.",
        ])
    out.append("")
    out += swift_array(
        "extensionRuns", "UInt32", [f"0x{first << 8 | value:08X}" for first, value in extension_runs],
        [
            "Script_Extensions: `first code point << 8 | set number + 1`, sorted, 0 where a code",
            "point has no extensions (they are its script).",
        ])
    out.append("")
    out += swift_array(
        "extensionSets", "[UInt8]", ["[" + ", ".join(str(member) for member in members) + "]" for members in sets],
        ["The Script_Extensions sets, as script numbers."])
    out.append("}")
    with open(OUTPUT, "w", encoding="utf-8") as file:
        file.write("\n".join(out) + "\n")
    print(
        f"make-script-table: Unicode {unicode_version}: {len(names)} scripts, {len(script_runs)} runs, "
        f"{len(extension_runs)} extension runs, {len(sets)} extension sets")


if __name__ == "__main__":
    main()
