#!/usr/bin/env bash
# Checks that the man pages say what the binaries' --help says:
#
#   bash packaging/tests/manpages.sh BIN_DIR MAN_DIR
#
# MAN_DIR holds keyauth.1 and keyauth-server.8 (or .1.gz, .8.gz, or man1/keyauth.1.gz and
# man8/keyauth-server.8.gz as under /usr/share/man once installed). For keyauth(1): every option
# of `keyauth --help` and of each command's help, and every command, as a subsection. For
# keyauth-server(8): every option of its --help, and every command of its usage lines in
# COMMANDS. For both: every exit status that --help names is an entry of EXIT STATUS, and groff
# has no warning about the page. Prints what is missing and exits 1; exits 0 when nothing is.
set -euo pipefail

bin_dir=$1
man_dir=$2
test_name=manpages
# shellcheck source=packaging/tests/common.sh
source "$(dirname "$0")/common.sh"

page_file() {
    local name=$1
    for candidate in "$man_dir/$name" "$man_dir/$name.gz" "$man_dir/man${name##*.}/$name.gz"; do
        [ -f "$candidate" ] && { echo "$candidate"; return; }
    done
    echo "manpages: no $name in $man_dir" >&2
    exit 1
}

# The page as text, one paragraph a line where possible, hyphens as typed.
render() {
    MANWIDTH=1000 MAN_KEEP_FORMATTING='' man --no-hyphenation --no-justification -l "$1" 2>/dev/null | col -b
}

# The lines of one section (a title at column 0) of a rendered page.
section() {
    awk -v title="$2" '$0 == title { inside = 1; next } /^[A-Z]/ { inside = 0 } inside' <<<"$1"
}

contains_word() {
    grep -qE -- "(^|[^[:alnum:]-])$2([^[:alnum:]-]|\$)" <<<"$1"
}

check_warnings() {
    local warnings
    warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$1" 2>&1 >/dev/null || true)
    [ -z "$warnings" ] || fail "$(basename "$1"): groff warns: $warnings"
}

# The numbers after "Exit status:" in a help text, up to the end of that paragraph.
exit_statuses_in() {
    awk '/Exit status:/ { inside = 1 } inside && /^$/ { inside = 0 } inside' <<<"$1" |
        sed 's/.*Exit status://' | grep -oE '(^|[ (,])[0-9]{1,3}\b' | tr -dc '0-9\n' | sort -un
}

check_exit_statuses() {
    local page=$1 text=$2 help=$3 statuses status
    statuses=$(section "$text" "EXIT STATUS")
    for status in $(exit_statuses_in "$help"); do
        grep -qE "^ +$status( |\$)" <<<"$statuses" || fail "$page: exit status $status of --help is not in EXIT STATUS"
    done
}

# keyauth(1)
keyauth_page=$(page_file keyauth.1)
check_warnings "$keyauth_page"
keyauth_text=$(render "$keyauth_page")
[ -n "$keyauth_text" ] || fail "keyauth.1 renders empty"
overview=$("$bin_dir/keyauth" --help)
all_help=$overview
commands=$(keyauth_commands <<<"$overview")
[ -n "$commands" ] || fail "keyauth --help lists no commands"
command_section=$(section "$keyauth_text" "COMMANDS")
for command in $commands; do
    grep -qE "^   $command\$" <<<"$command_section" || fail "keyauth.1: no subsection for the command $command"
    all_help+=$'\n'$("$bin_dir/keyauth" "$command" --help)
done
for option in $(options_in <<<"$all_help"); do
    contains_word "$keyauth_text" "$option" || fail "keyauth.1 lacks $option, which keyauth --help names"
done
check_exit_statuses keyauth.1 "$keyauth_text" "$overview"

# keyauth-server(8)
server_page=$(page_file keyauth-server.8)
check_warnings "$server_page"
server_text=$(render "$server_page")
[ -n "$server_text" ] || fail "keyauth-server.8 renders empty"
server_help=$("$bin_dir/keyauth-server" --help)
for option in $(options_in <<<"$server_help"); do
    contains_word "$server_text" "$option" || fail "keyauth-server.8 lacks $option, which keyauth-server --help names"
done
verbs=$(awk '/^usage:/ { inside = 1 } /^$/ { inside = 0 } inside' <<<"$server_help" |
    sed -E 's/^(usage:)? +//' | awk '{ print $2 }' | tr -d '[]' | grep -E '^[a-z][a-z-]*$' | sort -u)
[ -n "$verbs" ] || fail "keyauth-server --help has no commands in its usage lines"
server_commands=$(section "$server_text" "COMMANDS")
for verb in $verbs; do
    grep -qE "^       $verb( |\$)" <<<"$server_commands" || fail "keyauth-server.8: the command $verb is not in COMMANDS"
done
check_exit_statuses keyauth-server.8 "$server_text" "$server_help"

finish "keyauth.1 and keyauth-server.8 match --help ($(options_in <<<"$all_help" | wc -l) and" \
    "$(options_in <<<"$server_help" | wc -l) options)"
