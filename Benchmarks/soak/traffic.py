"""The soak benchmark's traffic beside wrk's logins (Benchmarks/soak/run.sh starts it).

For --seconds it keeps up, against one keyauth-server:
- pollers: devices long-polling `GET /v1/auth-requests?wait=30` back to back, each answering the
  sign-in requests it is shown (four in five approved with a device assertion, one denied);
- CIBA clients: applications starting sign-ins (`POST /bc-authorize`) for those devices' users
  and polling the token endpoint every `interval` until the answer, which they check against
  the device's decision (a token, with an ID token for scope `openid`, or `access_denied`);
- device lifecycles at a steady rate, each with a fresh RSA-2048 key from `openssl genpkey`:
  a new user's first device (201), its login, its device list, its revocation by itself
  (`DELETE /v1/devices/{kid}`, 204) and a refused login after it; or a second device of an
  existing user (202 pending), approved by that user's first device, logged in, then revoked by
  the first device;
- scrapes of `/healthz`, `/metrics` (metrics listener), the JWK set and the discovery document.

Every answer is checked against what the protocol (docs/PROTOCOL.md) says it must be; any
other status, error code or a socket error counts as an error. Access tokens must carry the
expected `alg`. Connections are kept alive, and reopened before a request when idle for more
than 4 s (the server closes idle ones after 10 s), as an HTTP client library would.

Writes a JSON summary (--summary) at the end and the cumulative counts every 10 s (--csv).
Device keys come from a keyauth-bench `--keys-out` file: the key of line-order index i is
registered as user `bench-i`; the first --pollers are the pollers, the next --homes are the
users that get second devices.
"""

import argparse
import base64
import collections
import hashlib
import http.client
import json
import secrets
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.parse

import jwt
from cryptography.hazmat.primitives import serialization

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CIBA = "urn:openid:params:grant-type:ciba"
KINDS = [
    "login", "long-poll", "code-check", "answer", "bc-authorize", "ciba-poll", "keygen", "register", "approve-device",
    "device-list", "revoke", "refused-login", "healthz", "metrics", "jwks", "discovery",
]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Device:
    """An RSA device key: its kid (RFC 7638 thumbprint), SPKI PEM and assertions."""

    def __init__(self, key, user):
        self.key = key
        self.user = user
        numbers = key.public_key().public_numbers()
        jwk = {
            "e": b64url(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")),
            "kty": "RSA",
            "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
        }
        canonical = json.dumps(jwk, separators=(",", ":"), sort_keys=True).encode()
        self.kid = b64url(hashlib.sha256(canonical).digest())
        self.public_pem = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def assertion(self, issuer, **extra):
        now = int(time.time())
        claims = {"iss": self.kid, "sub": self.kid, "aud": issuer, "iat": now, "exp": now + 30,
                  "jti": secrets.token_urlsafe(16), **extra}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})


class Stopped(Exception):
    """The run is over: a request broken by the stop is not an error."""


class Tally:
    """Counts of answers by kind and status, latencies, and the errors, for all threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {kind: 0 for kind in KINDS}
        self.statuses = {}
        self.latencies = {}
        self.errors = 0
        self.samples = []
        self.token_kids = {}
        self.wakes = []
        self.polls_woken = 0
        self.polls_idle = 0
        self.decisions = {"approved": 0, "denied": 0}

    def record(self, kind, key, ms, ok, detail):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            by_status = self.statuses.setdefault(kind, {})
            by_status[key] = by_status.get(key, 0) + 1
            if kind != "long-poll":
                self.latencies.setdefault(kind, []).append(ms)
            if not ok:
                self.fail(kind, detail, locked=True)

    def fail(self, kind, detail, locked=False):
        if not locked:
            with self.lock:
                return self.fail(kind, detail, locked=True)
        self.errors += 1
        if len(self.samples) < 30:
            self.samples.append(f"{time.strftime('%H:%M:%S')} {kind}: {detail}")

    def add(self, field, value=1):
        with self.lock:
            setattr(self, field, getattr(self, field) + value)


class Client:
    """One keep-alive HTTP connection, reopened when idle for longer than the server allows."""

    IDLE = 4.0

    def __init__(self, run, port):
        self.run = run
        self.port = port
        self.connection = None
        self.last_used = 0.0
        run.clients.append(self)

    def abort(self):
        connection = self.connection
        if connection is not None and connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def send(self, method, path, body, headers, timeout):
        if self.connection is not None and time.monotonic() - self.last_used > self.IDLE:
            self.connection.close()
            self.connection = None
        if self.connection is None:
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        self.connection.timeout = timeout
        if self.connection.sock is not None:
            self.connection.sock.settimeout(timeout)
        try:
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = None
            raise
        self.last_used = time.monotonic()
        return response, data


class Run:
    """What every worker shares: settings, the tally, the stop flag."""

    def __init__(self, args):
        self.args = args
        self.issuer = args.issuer
        self.tally = Tally()
        self.stop = threading.Event()
        self.clients = []
        self.meetings = {}
        self.decided = {}
        self.codes = {}
        self.answers = 0
        self.lock = threading.Lock()
        self.client_auth = "Basic " + base64.b64encode(
            f"{urllib.parse.quote(args.client_id, safe='')}:{urllib.parse.quote(args.client_secret, safe='')}"
            .encode()).decode()

    def call(self, client, kind, method, path, expect, *, form=None, body=None, token=None, headers=None,
             timeout=15.0):
        """Sends one request and checks its answer: `expect` holds "STATUS" or "STATUS error" keys.

        Returns (key, parsed JSON or None, response), or (None, None, None) after a socket error.
        """
        headers = dict(headers or {})
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        start = time.monotonic()
        try:
            response, data = client.send(method, path, body, headers, timeout)
        except (OSError, http.client.HTTPException) as error:
            if self.stop.is_set():
                raise Stopped() from error
            self.tally.fail(kind, f"{method} {path.split('?')[0]}: {type(error).__name__}: {error}")
            return None, None, None
        ms = (time.monotonic() - start) * 1000
        document = None
        if response.getheader("Content-Type", "").startswith("application/json"):
            try:
                document = json.loads(data)
            except ValueError:
                document = None
        key = str(response.status)
        if response.status >= 400 and isinstance(document, dict):
            key += " " + str(document.get("error"))
        ok = key in expect
        self.tally.record(kind, key, ms, ok,
                          f"{method} {path.split('?')[0]} answered {key}: {data[:200]!r}")
        return key, document, response

    def check_token(self, kind, document, id_token=False):
        """An access token of the expected algorithm (and an RS256 ID token when asked)."""
        try:
            header = json.loads(b64url_decode(document["access_token"].split(".")[0]))
            if header.get("alg") != self.args.alg:
                self.tally.fail(kind, f"access token signed with {header.get('alg')}, not {self.args.alg}")
            with self.tally.lock:
                kid = header.get("kid", "?")
                self.tally.token_kids[kid] = self.tally.token_kids.get(kid, 0) + 1
            if id_token:
                id_header = json.loads(b64url_decode(document["id_token"].split(".")[0]))
                if id_header.get("alg") != "RS256":
                    self.tally.fail(kind, f"ID token signed with {id_header.get('alg')}")
        except (KeyError, ValueError, TypeError, AttributeError) as error:
            self.tally.fail(kind, f"token response without a readable token: {error!r}")

    def login(self, client, device, kind="login", expect=("200",)):
        key, document, _ = self.call(client, kind, "POST", "/oauth/token", set(expect), form={
            "grant_type": JWT_BEARER, "assertion": device.assertion(self.issuer)})
        if key == "200":
            self.check_token(kind, document)
            return document["access_token"]
        return None

    def meet(self, identifier, side, moment):
        """Notes when a client asked for a sign-in and when its device saw it: the wake latency."""
        with self.lock:
            other = self.meetings.pop(identifier, None)
            if other is None:
                self.meetings[identifier] = (side, moment)
                return
        asked, seen = (other[1], moment) if side == "seen" else (moment, other[1])
        with self.tally.lock:
            self.tally.wakes.append((seen - asked) * 1000)

    def note_code(self, identifier, code):
        """The code a client's screen shows for its request, which the user reads there."""
        with self.lock:
            self.codes[identifier] = code

    def code_of(self, identifier):
        """The code of a request, once its client has it (the device may see the request first)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self.lock:
                if identifier in self.codes:
                    return self.codes.pop(identifier)
            self.pause(0.01)
        return None

    def decide(self, identifier):
        """Whether a device approves this request: four in five, over all devices."""
        with self.lock:
            self.answers += 1
            approve = self.answers % 5 != 0
            self.decided[identifier] = approve
        return approve

    def pause(self, seconds):
        if self.stop.wait(seconds):
            raise Stopped()


class Tokens:
    """A device's access token, renewed well before it expires (900 s by default)."""

    def __init__(self, run, client, device):
        self.run, self.client, self.device = run, client, device
        self.token, self.obtained = None, 0.0

    def get(self):
        if self.token is None or time.monotonic() - self.obtained > 600:
            self.token = self.run.login(self.client, self.device)
            self.obtained = time.monotonic()
        return self.token


def poller(run, device):
    client = Client(run, run.args.port)
    tokens = Tokens(run, client, device)
    cursor = None
    answered = set()
    while not run.stop.is_set():
        token = tokens.get()
        if token is None:
            run.pause(1)
            continue
        path = "/v1/auth-requests?wait=30" + (f"&after={cursor}" if cursor else "")
        start = time.monotonic()
        key, document, _ = run.call(client, "long-poll", "GET", path, {"200"}, token=token, timeout=45)
        if key != "200" or not isinstance(document, dict):
            run.pause(1)
            continue
        cursor = document.get("cursor", cursor)
        requests = [r for r in document.get("requests", []) if r.get("id") not in answered]
        run.tally.add("polls_woken" if requests else "polls_idle")
        if not requests and time.monotonic() - start < 25:
            run.tally.fail("long-poll", f"answered after {time.monotonic() - start:.1f} s with nothing new")
        for request in requests:
            identifier = request["id"]
            run.meet(identifier, "seen", time.monotonic())
            approve = run.decide(identifier)
            body = {"decision": "approve" if approve else "deny"}
            if approve:
                # Number matching: the device never shows the code; the user types what the
                # client's screen shows, now and then mistyped once first.
                code = run.code_of(identifier)
                if code is None:
                    run.tally.fail("code-check", "no code for a request the device saw")
                    continue
                if len(answered) % 10 == 3:
                    run.call(client, "code-check", "POST", f"/v1/auth-requests/{identifier}/code",
                             {"400 wrong_code"}, body={"code": "not " + code}, token=token)
                run.call(client, "code-check", "POST", f"/v1/auth-requests/{identifier}/code", {"200"},
                         body={"code": code}, token=token)
                body["assertion"] = device.assertion(run.issuer, auth_req_id=identifier, amr=["swk"],
                                                     binding_code=code)
            key, document, _ = run.call(client, "answer", "POST", f"/v1/auth-requests/{identifier}", {"200"},
                                        body=body, token=token)
            if key == "200":
                with run.tally.lock:
                    run.tally.decisions["approved" if approve else "denied"] += 1
            answered.add(identifier)


# One client prompts a user at most this many times in any hour: its share of the user's 20
# (docs/PROTOCOL.md section 8). Every CIBA thread here is the same registered client.
HOURLY_PROMPTS = 10


def ciba_client(run, users, index):
    client = Client(run, run.args.port)
    auth = {"Authorization": run.client_auth}
    count = 0
    # The server lets this client ask a user HOURLY_PROMPTS times an hour (sliding): the times this
    # client's requests for each user were accepted, to know which answer to expect.
    accepted = {user: collections.deque() for user in users}
    while not run.stop.is_set():
        now = time.monotonic()
        for times in accepted.values():
            while times and now - times[0] > 3600:
                times.popleft()
        # The next user with prompts left; when every one is capped, ask anyway: the cap is
        # then what is checked. Within 5 s of a slot freeing, either answer is right.
        open_users = [user for user in users if len(accepted[user]) < HOURLY_PROMPTS]
        user = open_users[count % len(open_users)] if open_users else users[count % len(users)]
        count += 1
        times = accepted[user]
        if len(times) < HOURLY_PROMPTS:
            expect = {"200"}
        elif now - times[0] > 3600 - 5:
            expect = {"200", "429 slow_down"}
        else:
            expect = {"429 slow_down"}
        openid = count % 2 == 0
        form = {"login_hint": user, "binding_message": f"soak {index}-{count}", "requested_expiry": "60"}
        if openid:
            form["scope"] = "openid"
        asked = time.monotonic()
        key, document, _ = run.call(client, "bc-authorize", "POST", "/bc-authorize", expect, form=form,
                                    headers=auth)
        if key != "200":
            run.pause(5 if key == "429 slow_down" else 1)
            continue
        times.append(asked)
        identifier = document["auth_req_id"]
        run.note_code(identifier, form["binding_message"])
        run.meet(identifier, "asked", asked)
        interval = document.get("interval", 5)
        while True:
            run.pause(interval + 0.3)
            key, document, _ = run.call(
                client, "ciba-poll", "POST", "/oauth/token",
                {"200", "400 authorization_pending", "400 access_denied"},
                form={"grant_type": CIBA, "auth_req_id": identifier}, headers=auth)
            if key == "400 authorization_pending":
                continue
            with run.lock:
                approved = run.decided.pop(identifier, None)
            if key == "200":
                run.check_token("ciba-poll", document, id_token=openid)
                if approved is not True:
                    run.tally.fail("ciba-poll", f"a token for a request the device did not approve ({approved})")
            elif key == "400 access_denied" and approved is not False:
                run.tally.fail("ciba-poll", f"access_denied for a request the device did not deny ({approved})")
            break


def new_device(run, user):
    """A fresh RSA-2048 key from `openssl genpkey` (another process: no GIL held meanwhile)."""
    start = time.monotonic()
    result = subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
                            capture_output=True, check=False)
    ms = (time.monotonic() - start) * 1000
    run.tally.record("keygen", "ok" if result.returncode == 0 else "failed", ms, result.returncode == 0,
                     result.stderr[:200])
    if result.returncode != 0:
        return None
    return Device(serialization.load_pem_private_key(result.stdout, password=None), user)


def lifecycles(run, homes):
    client = Client(run, run.args.port)
    home_tokens = [Tokens(run, client, home) for home in homes]
    period = 60.0 / run.args.registrations_per_minute
    due = time.monotonic()
    count = 0
    while not run.stop.is_set():
        run.pause(max(0.0, due - time.monotonic()))
        due += period
        count += 1
        if count % 2 == 1:
            device = new_device(run, f"soak-{count}")
            if device:
                first_device(run, client, device)
        else:
            home = home_tokens[(count // 2) % len(home_tokens)]
            device = new_device(run, home.device.user)
            if device:
                second_device(run, client, device, home)


def register(run, client, device, expect):
    key, document, _ = run.call(client, "register", "POST", "/v1/devices", {expect}, body={
        "user": device.user, "public_key": device.public_pem, "name": f"soak device {device.user}",
        "proof": device.assertion(run.issuer)})
    if key == expect and document.get("kid") != device.kid:
        run.tally.fail("register", f"registration answered kid {document.get('kid')}, not {device.kid}")
    return key == expect


def first_device(run, client, device):
    """A new user's first device: registered active, logged in, listed, revoked by itself."""
    if not register(run, client, device, "201"):
        return
    token = run.login(client, device)
    if token is None:
        return
    key, document, _ = run.call(client, "device-list", "GET", "/v1/devices", {"200"}, token=token)
    if key == "200" and [d.get("status") for d in document.get("devices", []) if d.get("kid") == device.kid] != [
            "active"]:
        run.tally.fail("device-list", "the new device is not listed once as active")
    key, _, _ = run.call(client, "revoke", "DELETE", f"/v1/devices/{device.kid}", {"204"}, token=token)
    if key == "204":
        run.login(client, device, kind="refused-login", expect=("400 invalid_grant",))


def second_device(run, client, device, home):
    """A second device of an existing user: pending, approved by the first, logged in, revoked."""
    if not register(run, client, device, "202"):
        return
    token = home.get()
    if token is None:
        return
    # Approving a device takes the approving device's assertion naming it, after its PIN.
    approval = home.device.assertion(run.issuer, approve_kid=device.kid, amr=["swk", "pin"])
    run.call(client, "approve-device", "POST", f"/v1/devices/{device.kid}/approve", {"200"},
             body={"assertion": approval}, token=token)
    run.login(client, device)
    run.call(client, "revoke", "DELETE", f"/v1/devices/{device.kid}", {"204"}, token=token)


def scraper(run):
    public = Client(run, run.args.port)
    metrics = Client(run, run.args.metrics_port)
    while not run.stop.is_set():
        run.call(public, "healthz", "GET", "/healthz", {"200"})
        run.call(metrics, "metrics", "GET", "/metrics", {"200"})
        run.call(public, "jwks", "GET", "/.well-known/jwks.json", {"200"})
        run.call(public, "discovery", "GET", "/.well-known/openid-configuration", {"200"})
        run.pause(run.args.scrape_seconds)


def guarded(run, name, body, *arguments):
    """Runs a worker until the stop; a failure of this script counts as an error, never silently."""
    while not run.stop.is_set():
        try:
            body(run, *arguments)
        except Stopped:
            return
        except Exception as error:  # noqa: BLE001 - any bug here must show in the result
            run.tally.fail(name, f"traffic.py failed: {type(error).__name__}: {error}")
            if run.stop.wait(1):
                return


def read_devices(path, count):
    text = open(path, encoding="ascii").read()
    end = "-----END PRIVATE KEY-----"
    pems = [part + end + "\n" for part in text.split(end)[:-1]]
    if len(pems) < count:
        raise SystemExit(f"traffic.py: {path} holds {len(pems)} keys, {count} needed")
    return [Device(serialization.load_pem_private_key(pem.encode(), password=None), f"bench-{index}")
            for index, pem in enumerate(pems[:count])]


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--alg", required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--pollers", type=int, default=32)
    parser.add_argument("--homes", type=int, default=4)
    parser.add_argument("--ciba-clients", type=int, default=6)
    parser.add_argument("--registrations-per-minute", type=float, default=30)
    parser.add_argument("--scrape-seconds", type=float, default=5)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--csv", required=True)
    args = parser.parse_args()

    devices = read_devices(args.keys, args.pollers + args.homes)
    pollers, homes = devices[:args.pollers], devices[args.pollers:]
    run = Run(args)
    signal.signal(signal.SIGTERM, lambda *_: run.stop.set())
    threads = [threading.Thread(target=guarded, args=(run, "poller", poller, device), daemon=True)
               for device in pollers]
    clients = max(1, min(args.ciba_clients, len(pollers)))
    for index in range(clients):
        users = [device.user for device in pollers[index::clients]]
        threads.append(threading.Thread(target=guarded, args=(run, "ciba", ciba_client, users, index), daemon=True))
    if args.registrations_per_minute > 0:
        threads.append(threading.Thread(target=guarded, args=(run, "lifecycle", lifecycles, homes), daemon=True))
    threads.append(threading.Thread(target=guarded, args=(run, "scraper", scraper), daemon=True))
    start = time.monotonic()
    for thread in threads:
        thread.start()
    with open(args.csv, "w", encoding="ascii") as csv:
        csv.write("seconds," + ",".join(KINDS) + ",errors\n")
        while not run.stop.wait(min(10.0, max(0.0, args.seconds - (time.monotonic() - start)))):
            with run.tally.lock:
                row = [run.tally.counts[kind] for kind in KINDS] + [run.tally.errors]
            csv.write(f"{time.monotonic() - start:.0f}," + ",".join(map(str, row)) + "\n")
            csv.flush()
            if time.monotonic() - start >= args.seconds:
                run.stop.set()
    elapsed = time.monotonic() - start
    for client in list(run.clients):
        client.abort()
    for thread in threads:
        thread.join(timeout=20)
    stuck = sum(thread.is_alive() for thread in threads)
    if stuck:
        run.tally.fail("traffic", f"{stuck} worker threads did not stop within 20 s")
    tally = run.tally
    with tally.lock:
        summary = {
            "seconds": round(elapsed, 1),
            "counts": tally.counts,
            "statuses": tally.statuses,
            "latency_ms": {kind: {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
                                  "max": percentile(values, 1.0)} for kind, values in tally.latencies.items()},
            "errors": tally.errors,
            "error_samples": tally.samples,
            "long_polls": {"woken": tally.polls_woken, "idle": tally.polls_idle},
            "wake_ms": {"count": len(tally.wakes), "p50": percentile(tally.wakes, 0.5),
                        "p99": percentile(tally.wakes, 0.99), "max": percentile(tally.wakes, 1.0),
                        "mean": round(statistics.fmean(tally.wakes), 2) if tally.wakes else None},
            "decisions": tally.decisions,
            "token_kids": tally.token_kids,
        }
    with open(args.summary, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
