# fish completion for keyauth(1). Installed as
# /usr/share/fish/vendor_completions.d/keyauth.fish.

set -l commands register login token proof logout status devices pubkey pin default reset agent requests approve deny recovery-codes ssh attest help

function __keyauth_accounts
    set -l home $KEYAUTH_HOME
    if test -z "$home"
        if test -n "$XDG_DATA_HOME"
            set home $XDG_DATA_HOME/keyauth
        else
            set home $HOME/.local/share/keyauth
        end
    end
    command ls -1 $home/accounts 2>/dev/null
end

complete -c keyauth -f
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -s h -l help -d 'Show help'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -s V -l version -d 'Show the version'

complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a register -d 'Generate a device key and register it with a server'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a login -d 'Prove presence, sign an assertion, get and store an access token'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a token -d 'Print a valid access token'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a proof -d 'Print a DPoP proof for one request'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a logout -d 'Forget the stored access token; keep the key'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a pin -d 'Change the PIN of the device key'
complete -c keyauth -n "__fish_seen_subcommand_from pin" -a change -d 'Change the PIN'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a requests -d 'Sign-in requests waiting for approval'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a approve -d 'Approve a sign-in request'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a deny -d 'Deny a sign-in request'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a default -d 'Show or set the default account'
complete -c keyauth -n "__fish_seen_subcommand_from default" -x -a '(__keyauth_accounts)'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a status -d 'Show accounts, key fingerprints and token expiry'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a devices -d "List, approve or revoke this user's devices"
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a pubkey -d "Print this device's public key"
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a ssh -d 'SSH certificate of the device key'
complete -c keyauth -n "__fish_seen_subcommand_from ssh" -a 'cert config' -d 'Get a certificate, or print ssh config lines'
complete -c keyauth -n "__fish_seen_subcommand_from ssh" -l write -r -d 'Save the certificate here'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a reset -d 'Revoke the key on the server, then delete it here'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a agent -d 'Hold the unlocked key so login and token ask no PIN'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a recovery-codes -d 'Make one-time codes that enrol a device when every device is lost'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a attest -d 'Prove again that the device key is in a TPM, to raise its tier'
complete -c keyauth -n "not __fish_seen_subcommand_from $commands" -a help -d 'Show the help of a command'
complete -c keyauth -n "__fish_seen_subcommand_from help" -a "$commands"

# Options several commands share.
complete -c keyauth -n "__fish_seen_subcommand_from register login token proof logout status devices pubkey pin reset agent recovery-codes ssh attest" -l account -x -a '(__keyauth_accounts)' -d 'The account name'
complete -c keyauth -n "__fish_seen_subcommand_from register login token proof devices pin reset agent recovery-codes ssh attest" -l pin-stdin -d 'Read the PIN from standard input'
complete -c keyauth -n "__fish_seen_subcommand_from register login token proof logout status devices pubkey pin reset agent recovery-codes ssh attest" -s h -l help -d 'Show help'

complete -c keyauth -n "__fish_seen_subcommand_from register" -l server -x -d 'The server base URL'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l user -x -d 'The user name on the server'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l name -x -d 'The device name'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l key-store -x -a 'tpm file auto' -d 'Where the key lives'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l bits -x -a '2048 3072 4096' -d 'Key size'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l presence -x -a 'pin pam none' -d 'How to check presence'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l pam-service -x -a '(command ls -1 /etc/pam.d)' -d 'The PAM service'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l enrollment-code -x -d 'A one-time code from keyauth-server enroll, - for standard input'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l recovery-code -x -d "One of the user's recovery codes, - for standard input"
complete -c keyauth -n "__fish_seen_subcommand_from register login" -l no-wait -d 'Return at once when approval is needed'
complete -c keyauth -n "__fish_seen_subcommand_from register" -l insecure-http -d 'Allow plain http:// to a host that is not loopback'
complete -c keyauth -n "__fish_seen_subcommand_from status devices requests" -l json -d 'Print JSON'
complete -c keyauth -n "__fish_seen_subcommand_from devices; and not __fish_seen_subcommand_from list approve revoke" -a 'list approve revoke'
complete -c keyauth -n "__fish_seen_subcommand_from pubkey" -l jwk -d 'Print a JWK instead of PEM'
complete -c keyauth -n "__fish_seen_subcommand_from reset" -l yes -d 'Do not ask for confirmation'
complete -c keyauth -n "__fish_seen_subcommand_from reset" -l local-only -d 'Skip the server'

complete -c keyauth -n "__fish_seen_subcommand_from proof" -l nonce -x -d "The server's DPoP-Nonce"
complete -c keyauth -n "__fish_seen_subcommand_from agent" -l timeout -x -d 'How long to hold the key (8h, 30m, 1h30m)'
complete -c keyauth -n "__fish_seen_subcommand_from agent" -l background -d 'Detach and print shell lines for eval'
complete -c keyauth -n "__fish_seen_subcommand_from agent" -l lock -d "Clear the running agent's key; it keeps running"
complete -c keyauth -n "__fish_seen_subcommand_from agent" -l stop -d 'Clear the key and end the agent'
