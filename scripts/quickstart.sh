#!/usr/bin/env bash
# The README's first quick-start command: install what is missing, build in release mode,
# start keyauth-server on an embedded SQLite file on loopback, issue an enrollment code (the
# server requires one for a new user's first device), register a device with it, log in,
# print the verified access token's claims, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

echo "== building (release)" >&2
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth >&2
bin=$(swift build -c release --show-bin-path)

work=$(mktemp -d /tmp/keyauth-quickstart.XXXXXX)
chmod 700 "$work"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

echo "== starting keyauth-server on 127.0.0.1:$port with $work/keyauth-server.db" >&2
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/keyauth-server.db" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then break; fi
    sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || { cat "$work/server.log" >&2; exit 1; }

echo "== keyauth-server enroll demo (a one-time code for the user's first device)" >&2
code=$("$bin/keyauth-server" enroll demo --db "$work/keyauth-server.db")

export KEYAUTH_HOME="$work/client"
echo "== keyauth register (RSA-3072 device key, no presence check for this unattended demo)" >&2
"$bin/keyauth" register --server "http://127.0.0.1:$port" --user demo --name quickstart-device --presence none \
    --enrollment-code "$code"
echo "== keyauth login" >&2
"$bin/keyauth" login
echo "== keyauth status" >&2
"$bin/keyauth" status
token=$("$bin/keyauth" token)

echo "== the access token, verified with PyJWT against the server's JWKS" >&2
python3 - "$token" "http://127.0.0.1:$port" <<'PY'
import json, sys, urllib.request
import jwt
token, issuer = sys.argv[1], sys.argv[2]
jwks = json.load(urllib.request.urlopen(issuer + "/.well-known/jwks.json"))
kid = jwt.get_unverified_header(token)["kid"]
key = next(jwt.PyJWK(k) for k in jwks["keys"] if k["kid"] == kid)
claims = jwt.decode(token, key, algorithms=["RS256"], audience=issuer, issuer=issuer)
print(json.dumps(claims, indent=2, sort_keys=True))
PY
echo "== done; stopping the server" >&2
