"""The /authorize flood benchmark (see run.sh): one address floods GET /authorize while a
browser from another address signs alice in. Standard library only."""

import base64
import hashlib
import html
import http.client
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

bin_dir, seconds, connections = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
server_bin = os.path.join(bin_dir, "keyauth-server")
keyauth_bin = os.path.join(bin_dir, "keyauth")
work = tempfile.mkdtemp(prefix="keyauth-flood-")
database = os.path.join(work, "server.db")
environment = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "KEYAUTH_SERVER_CONFIG": "/dev/null"}


def database_size():
    return sum(os.path.getsize(database + suffix) for suffix in ("", "-wal") if os.path.exists(database + suffix))


def row_counts():
    connection = sqlite3.connect("file:%s?mode=ro" % database, uri=True)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: connection.execute('SELECT COUNT(*) FROM "%s"' % table).fetchone()[0] for table in tables}
    finally:
        connection.close()


log = open(os.path.join(work, "server.log"), "w")
server = subprocess.Popen(
    [server_bin, "serve", "--listen", "127.0.0.1:0", "--db", database, "--enrollment", "open",
     "--metrics-listen", "off"], env=environment, stdout=subprocess.DEVNULL, stderr=log)
try:
    port = None
    deadline = time.time() + 60
    while port is None and time.time() < deadline:
        with open(log.name) as handle:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", handle.read())
        port = int(found.group(1)) if found else None
        time.sleep(0.05)
    if port is None:
        sys.exit("the server did not start: " + open(log.name).read())
    url = "http://127.0.0.1:%d" % port

    added = subprocess.run(
        [server_bin, "clients", "add", "Flood test", "--redirect-uri", "https://app.example/cb", "--db", database],
        env=environment, capture_output=True, text=True, check=True)
    client_id = re.search(r"client_id=(\S+)", added.stdout).group(1)
    home = os.path.join(work, "alice")
    device_env = dict(environment, KEYAUTH_HOME=home, HOME=home)
    subprocess.run([keyauth_bin, "register", "--server", url, "--user", "alice", "--bits", "2048", "--presence", "none"],
                   env=device_env, capture_output=True, text=True, check=True)

    verifier = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = urllib.parse.urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": "https://app.example/cb",
        "scope": "openid", "state": "s" * 1024, "nonce": "n", "code_challenge": challenge,
        "code_challenge_method": "S256"})

    before_size, before_rows = database_size(), row_counts()

    def sign_in():
        """A browser on 127.0.0.2 through /authorize, approved on alice's device."""
        started = time.time()
        cookies = {}

        def request(method, path, form=None):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.2", 0))
            headers = {"Cookie": "; ".join("%s=%s" % item for item in cookies.items())}
            body = None
            if form is not None:
                body = urllib.parse.urlencode(form)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            for value in response.headers.get_all("Set-Cookie") or []:
                name, _, rest = value.partition("=")
                cookies[name] = rest.split(";")[0]
            text = response.read().decode()
            connection.close()
            return response.status, response.headers, text

        def hidden(name, page):
            return html.unescape(re.search(r'name="%s" value="([^"]*)"' % name, page).group(1))

        status, _, page = request("GET", "/authorize?" + query)
        reference = hidden("authorization", page)
        status, _, waiting = request("POST", "/authorize/sign-in", [
            ("csrf", hidden("csrf", page)), ("authorization", reference), ("user", "alice")])
        code = re.search(r'id="binding-code">([^<]*)<', waiting).group(1)
        approved = subprocess.run([keyauth_bin, "approve", "--pin-stdin"], env=device_env, input=code + "\n",
                                  capture_output=True, text=True, timeout=60)
        status, headers, _ = request("POST", "/authorize/continue", [
            ("csrf", hidden("csrf", waiting)), ("authorization", reference)])
        location = headers.get("Location", "")
        result["sign_in"] = {
            "approve_status": approved.returncode, "redirect_status": status,
            "got_code": "code=" in location, "seconds": round(time.time() - started, 2)}

    result = {}
    flood = subprocess.Popen(
        ["wrk", "-t1", "-c%d" % connections, "-d%ds" % seconds, url + "/authorize?" + query],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(min(5, seconds / 2))
    signer = threading.Thread(target=sign_in)
    signer.start()
    output, _ = flood.communicate(timeout=seconds + 60)
    signer.join(timeout=120)
    after_size, after_rows = database_size(), row_counts()

    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    total = re.search(r"(\d+) requests in", output)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    print("flood: %s GET /authorize from one address in %d s (%s/s), non-2xx %s" % (
        total.group(1) if total else "?", seconds, rate.group(1) if rate else "?",
        non2xx.group(1) if non2xx else "0"))
    print("database (file + WAL): %d bytes before, %d after (%+d)" % (before_size, after_size, after_size - before_size))
    changed = {table: (before_rows.get(table, 0), count) for table, count in after_rows.items()
               if count != before_rows.get(table, 0)}
    print("rows changed: %s" % (changed or "none"))
    print("sign-in during the flood: %s" % result.get("sign_in", "did not finish"))
    sign_in = result.get("sign_in", {})
    ok = sign_in.get("got_code") and sign_in.get("approve_status") == 0 and after_size - before_size <= 1 << 20
    sys.exit(0 if ok else 1)
finally:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(work, ignore_errors=True)
