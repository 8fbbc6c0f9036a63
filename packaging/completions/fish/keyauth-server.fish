# fish completion for keyauth-server(8). Installed as
# /usr/share/fish/vendor_completions.d/keyauth-server.fish.

set -l verbs serve enroll devices revoke keys help
set -l serving "not __fish_seen_subcommand_from enroll devices revoke keys help"

complete -c keyauth-server -f
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a serve -d 'Run the server (the default)'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a enroll -d 'Print a one-time enrollment code for a user'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a devices -d 'List every device of every user'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a revoke -d 'Revoke a device, or deny a pending one'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a keys -d 'List or rotate the signing keys'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -a help -d 'Show the help'
complete -c keyauth-server -n "not __fish_seen_subcommand_from $verbs" -s V -l version -d 'Print the version'
complete -c keyauth-server -s h -l help -d 'Show the help'

complete -c keyauth-server -l db -r -F -d 'Storage: a SQLite file or postgres://...'
complete -c keyauth-server -n $serving -l listen -x -d 'Address to listen on, HOST:PORT'
complete -c keyauth-server -n $serving -l issuer -x -d 'Public base URL, iss and aud of tokens'
complete -c keyauth-server -n $serving -l enrollment -x -a 'code open' -d 'Whether a first device needs an enrollment code'
complete -c keyauth-server -n $serving -l dpop -x -a 'optional required' -d 'Whether access tokens must be DPoP-bound'
complete -c keyauth-server -n $serving -l dpop-nonce -d 'Require DPoP proofs to carry a server nonce'
complete -c keyauth-server -n $serving -l metrics-listen -x -a off -d 'Where /metrics and /healthz are served'
complete -c keyauth-server -n $serving -l trust-proxy -d 'Count the last X-Forwarded-For hop as the client address'
complete -c keyauth-server -n $serving -l rate-limit -x -d 'Failed logins and registrations per address and minute'
complete -c keyauth-server -n $serving -l registration-limit -x -d 'Registrations per address and minute'
complete -c keyauth-server -n $serving -l token-lifetime -x -d 'Access token lifetime in seconds'
complete -c keyauth-server -n $serving -l threads -x -d 'HTTP worker threads'
complete -c keyauth-server -n $serving -l max-connections -x -d 'Simultaneous connections'
complete -c keyauth-server -n $serving -l max-connections-per-address -x -d 'Simultaneous connections from one address'
complete -c keyauth-server -n $serving -l request-timeout -x -d 'Seconds to send each whole request'
complete -c keyauth-server -n $serving -l connection-timeout -x -d 'Idle seconds before a connection closes'
complete -c keyauth-server -n $serving -l signing-key-bits -x -a '2048 3072 4096' -d 'Size of the signing key made on first start'
complete -c keyauth-server -n $serving -l token-alg -x -a 'RS256 ES256 EdDSA' -d 'Algorithm of the signing key made on first start'
complete -c keyauth-server -n $serving -l signing-key-file -r -F -d 'Sign with this PEM key (RSA, EC P-256 or Ed25519)'
complete -c keyauth-server -n $serving -l cleanup-interval -x -d 'Seconds between purges, key reloads and retirements'
complete -c keyauth-server -n "__fish_seen_subcommand_from keys" -a 'list rotate' -d 'Keys action'
complete -c keyauth-server -n "__fish_seen_subcommand_from keys" -l alg -x -a 'RS256 ES256 EdDSA' -d 'Algorithm of the new key'
complete -c keyauth-server -n "__fish_seen_subcommand_from keys" -l delay -x -d 'Seconds before the new key signs'
complete -c keyauth-server -n $serving -l quiet -d 'No per-request log lines'
