# shellcheck shell=bash
# What the packaging tests share; sourced, not run. Each test counts its problems with `fail`
# and ends with `finish`.

: "${test_name:?set test_name before sourcing common.sh}"
failures=0

# Records one problem, named after the test ($test_name).
fail() {
    echo "$test_name: $*" >&2
    failures=$((failures + 1))
}

# Exits 1 after any problem, else prints the summary given and exits 0.
finish() {
    if [ "$failures" -gt 0 ]; then
        echo "$test_name: $failures problem(s)" >&2
        exit 1
    fi
    echo "$test_name: $*"
    exit 0
}

# Every option (-x, --long-name) that the text on standard input names.
options_in() {
    grep -oE -- '(^|[^[:alnum:]-])--?[[:alpha:]][[:alnum:]-]*' | sed -E 's/^[^-]//' | sort -u
}

# The commands `keyauth --help` lists (its "commands:" block), given that help on stdin.
keyauth_commands() {
    awk '/^commands:/ { inside = 1; next } /^$/ { inside = 0 } inside && /^  [a-z]/ { print $1 }'
}
