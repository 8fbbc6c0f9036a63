#!/usr/bin/env bash
# Regenerates the seed corpus in Fuzz/corpus/: a handful of small, valid inputs for each way the
# token-parser target reads its input (see Fuzz/TokenParser/main.swift). Tokens are signed by a
# throwaway key made here and deleted at once, but name the target's fixed key as `kid`, so the
# verifier runs a real RSA check that fails. Needs bash, openssl and base64.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
corpus="$here/corpus"
kid="BqMHq2FLV1rmSVj9LkMYzKbvLZvMtcOjOKeswRllbPA"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/key.pem" 2>/dev/null

# token HEADER_JSON PAYLOAD_JSON: a compact JWS of exactly these bytes, RS256 by the throwaway key.
token() {
    local input
    input="$(printf '%s' "$1" | b64url).$(printf '%s' "$2" | b64url)"
    printf '%s.%s' "$input" "$(printf '%s' "$input" | openssl dgst -sha256 -sign "$work/key.pem" | b64url)"
}

header='{"alg":"RS256","typ":"JWT","kid":"'"$kid"'"}'
claims='{"iss":"'"$kid"'","sub":"'"$kid"'","aud":"https://keyauth.fuzz",'
claims+='"iat":1800000000,"exp":1800000030,"jti":"q3JkS0pXc0FpUXZ4bW1nUQ"}'

mkdir -p "$corpus"
rm -f "$corpus"/seed-*
token "$header" "$claims" >"$corpus/seed-token"
token '{"alg":"RS256"}' '{"sub":"'"$kid"'","aud":["https://keyauth.fuzz","x"],"exp":1800000100}' \
    >"$corpus/seed-token-no-kid"
printf '%s' "$claims" >"$corpus/seed-claims.json"
printf '%s' "$header" >"$corpus/seed-header.json"
printf '%s\0%s' "$header" "$claims" >"$corpus/seed-assembled"
# Boundaries: a token that never expires (exp at the 64-bit maximum), and header plus payload
# that assemble to a token of exactly 8 KiB, the longest accepted.
printf '%s' "${claims/1800000030/9223372036854775807}" >"$corpus/seed-claims-far-exp.json"
long_claims="${claims/q3JkS0pXc0FpUXZ4bW1nUQ/$(printf 'j%.0s' $(seq 5629))}"
printf '%s\0%s' "$header" "$long_claims" >"$corpus/seed-assembled-long"
printf '%s' '{"a":[0,-1,1.5e3,2E-2,"\u00e9\ud83d\ude00\n",true,false,null,{}],"b":{"c":[]}}' >"$corpus/seed-mixed.json"
printf '%s' 'AQIDBAUGBwgJ-_8' >"$corpus/seed-base64url"
ls -l "$corpus"
