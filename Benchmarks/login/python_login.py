"""The comparison client of the login benchmark: what `keyauth login` does, in Python.

Loads the same RSA-3072 device key, signs a device assertion with PyJWT, posts it to the token
endpoint with urllib, and stores the access token in a 0600 file, so both clients do the same
work: process start, key load, sign, HTTP, token store.
"""
import json
import os
import secrets
import sys
import time
import urllib.parse
import urllib.request

import jwt
from cryptography.hazmat.primitives import serialization

key_file, issuer, kid, token_file = sys.argv[1:5]
with open(key_file, "rb") as handle:
    key = serialization.load_pem_private_key(handle.read(), password=None)
now = int(time.time())
assertion = jwt.encode(
    {"iss": kid, "sub": kid, "aud": issuer, "iat": now, "exp": now + 30, "jti": secrets.token_urlsafe(16)},
    key,
    algorithm="RS256",
    headers={"kid": kid},
)
body = urllib.parse.urlencode(
    {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}
).encode()
request = urllib.request.Request(issuer + "/oauth/token", data=body,
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
with urllib.request.urlopen(request, timeout=10) as response:
    token = json.load(response)
descriptor = os.open(token_file + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(descriptor, "w") as handle:
    json.dump({"access_token": token["access_token"], "expires_at": now + token["expires_in"]}, handle)
    handle.flush()
    os.fsync(handle.fileno())
os.replace(token_file + ".tmp", token_file)
