#!/usr/bin/env bash
# Checks the bash completions by calling their functions as bash would:
#
#   bash packaging/tests/completion.sh BASH_COMPLETION_DIR [BIN_DIR]
#
# BASH_COMPLETION_DIR holds the files keyauth and keyauth-server (packaging/completions/bash,
# or /usr/share/bash-completion/completions once installed). With BIN_DIR, it also checks that
# each command's completion offers every option its --help names, so that a new option cannot
# be forgotten. The zsh and fish files are checked for syntax when those shells are installed
# (beside BASH_COMPLETION_DIR as ../zsh and ../fish, or under /usr/share once installed).
# Prints what is wrong and exits 1; exits 0 when nothing is.
set -euo pipefail

directory=$1
bin_dir=${2:-}
test_name=completion
# shellcheck source=packaging/tests/common.sh
source "$(dirname "$0")/common.sh"

# shellcheck source=/dev/null
source "$directory/keyauth"
# shellcheck source=/dev/null
source "$directory/keyauth-server"

# What completing the last word of "$@" offers, sorted, on one line.
complete_words() {
    local function=$1
    shift
    COMP_WORDS=("$@")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="$*"
    COMP_POINT=${#COMP_LINE}
    COMPREPLY=()
    "$function"
    printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}

expect() {
    local expected=$1 function=$2
    shift 2
    local actual
    actual=$(complete_words "$function" "$@")
    [ "$actual" = "$expected" ] || fail "'$* <TAB>' offers '$actual', expected '$expected'"
}

expect "recovery-codes register requests reset" _keyauth keyauth re
expect "agent approve attest default deny devices help login logout pin proof pubkey recovery-codes register requests reset ssh status token" _keyauth keyauth ""
expect "--presence" _keyauth keyauth register --pre
expect "none pam pin" _keyauth keyauth register --presence ""
expect "2048 3072 4096" _keyauth keyauth register --bits ""
expect "approve list revoke" _keyauth keyauth devices ""
expect "--help --version" _keyauth keyauth --
expect "enroll" _keyauth_server keyauth-server e
expect "approve audit backup check-config clients codes delete-user devices enroll help keys revoke serve ssh-ca users" _keyauth_server keyauth-server ""
expect "--config --db --help --json --status --user" _keyauth_server keyauth-server devices --
expect "list revoke" _keyauth_server keyauth-server codes ""
expect "json text" _keyauth_server keyauth-server --log-format ""
expect "list rotate" _keyauth_server keyauth-server keys ""
expect "ES256 EdDSA RS256" _keyauth_server keyauth-server keys rotate --alg ""
expect "--alg" _keyauth_server keyauth-server keys rotate --a
expect "--db --delay" _keyauth_server keyauth-server keys rotate --d
expect "--enrollment" _keyauth_server keyauth-server serve --enr
expect "code open" _keyauth_server keyauth-server --enrollment ""
expect "--config --db --help" _keyauth_server keyauth-server revoke --
expect "--config --db --help --json --since" _keyauth_server keyauth-server audit --
expect "--json" _keyauth_server keyauth-server users --j

# Every long option a command's --help names is offered after that command.
long_options_in() {
    options_in | grep -- '^--'
}
if [ -n "$bin_dir" ]; then
    for command in $("$bin_dir/keyauth" --help | keyauth_commands); do
        offered=" $(complete_words _keyauth keyauth "$command" --) "
        for option in $("$bin_dir/keyauth" "$command" --help | long_options_in); do
            [[ $offered == *" $option "* ]] || fail "keyauth $command --<TAB> does not offer $option"
        done
    done
    offered=" $(complete_words _keyauth_server keyauth-server serve --) "
    # The options block only: the paragraphs after it name admin commands' options too.
    for option in $("$bin_dir/keyauth-server" --help | awk '/^serve options/ { inside = 1 } inside && /^$/ { exit } inside' |
        long_options_in); do
        [ "$option" = --version ] && continue # only alone, checked above
        # Options of `keys rotate` only, checked after it below.
        [ "$option" = --alg ] || [ "$option" = --delay ] && continue
        [[ $offered == *" $option "* ]] || fail "keyauth-server serve --<TAB> does not offer $option"
    done
fi

# zsh and fish: syntax only, where the shells are installed.
for zsh_file in "$directory/../zsh/_keyauth" "$directory/../zsh/_keyauth-server" \
    /usr/share/zsh/vendor-completions/_keyauth /usr/share/zsh/vendor-completions/_keyauth-server; do
    if [ -f "$zsh_file" ] && command -v zsh >/dev/null; then
        zsh -n "$zsh_file" || fail "$zsh_file: zsh syntax error"
    fi
done
for fish_file in "$directory/../fish/keyauth.fish" "$directory/../fish/keyauth-server.fish" \
    /usr/share/fish/vendor_completions.d/keyauth.fish /usr/share/fish/vendor_completions.d/keyauth-server.fish; do
    if [ -f "$fish_file" ] && command -v fish >/dev/null; then
        fish --no-execute "$fish_file" || fail "$fish_file: fish syntax error"
    fi
done

finish "bash completes keyauth and keyauth-server as expected"
