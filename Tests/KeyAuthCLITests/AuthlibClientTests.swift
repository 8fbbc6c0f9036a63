import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// An application written with Python's Authlib, as a third party writes one: Authlib checks the
/// discovery document, makes the authorization URL with a nonce and a PKCE S256 challenge,
/// exchanges the code, verifies the ID token against the JWKS (signature, `iss`, `aud`, `nonce`,
/// `azp`, `at_hash`), and calls `/userinfo` with the access token.
///
/// The browser's part is played with `requests` and the sign-in page's forms, without script:
/// the page's form for the user name, its binding code, `keyauth approve` on the laptop, then
/// the page's continue form, whose redirect goes to the application's redirect URI. A public
/// client's redirect URI is a listener on a loopback port of its own choosing (RFC 8252) that
/// receives the browser; signed in, its next request goes through the consent page. The script
/// prints one JSON line of what it saw.
private let applicationScript = #"""
    import http.server, json, subprocess, sys, threading, urllib.parse
    from html.parser import HTMLParser
    import requests
    from authlib.integrations.base_client import OAuthError
    from authlib.common.security import generate_token
    from authlib.integrations.requests_client import OAuth2Session
    from authlib.jose import JsonWebKey, jwt
    from authlib.oidc.core import CodeIDToken
    from authlib.oidc.discovery import OpenIDProviderMetadata

    server, client_id, client_secret, redirect_uri, keyauth, home = sys.argv[1:7]
    seen = {}

    class Forms(HTMLParser):
        """The page's forms (action, id, fields) and the text of id="binding-code"."""
        def __init__(self, page):
            super().__init__()
            self.forms, self.code, self._in_code = [], None, False
            self.feed(page)
        def handle_starttag(self, tag, attributes):
            attributes = dict(attributes)
            if tag == "form":
                self.forms.append({"action": attributes.get("action", ""), "id": attributes.get("id"), "fields": {}})
            elif tag == "input" and self.forms and attributes.get("name"):
                self.forms[-1]["fields"][attributes["name"]] = attributes.get("value") or ""
            if attributes.get("id") == "binding-code":
                self._in_code = True
        def handle_data(self, data):
            if self._in_code and data.strip():
                self.code, self._in_code = data.strip(), False

    def submit(browser, response, form, **values):
        fields = dict(form["fields"], **values)
        return browser.post(urllib.parse.urljoin(response.url, form["action"]), data=fields, allow_redirects=False)

    def follow(browser, response):
        """Follows redirects until the application's redirect URI, which is returned, or a page."""
        while response.status_code in (301, 302, 303, 307):
            location = urllib.parse.urljoin(response.url, response.headers["Location"])
            if location.split("?")[0] == redirect_uri:
                return location, response
            response = browser.get(location, allow_redirects=False)
        return None, response

    received = {}
    class Callback(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            received["url"] = "http://127.0.0.1:%d%s" % (self.server.server_port, self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"signed in")
        def log_message(self, *arguments):
            pass

    try:
        metadata = requests.get(server + "/.well-known/openid-configuration", timeout=10).json()
        OpenIDProviderMetadata(metadata).validate()
        seen["metadata_valid"] = True
        public = client_secret == "-"
        listener = None
        if public:
            # RFC 8252: the app listens on a port of its choosing; the registered URI has none.
            listener = http.server.HTTPServer(("127.0.0.1", 0), Callback)
            threading.Thread(target=listener.handle_request, daemon=True).start()
            redirect_uri = redirect_uri.replace("127.0.0.1", "127.0.0.1:%d" % listener.server_port, 1)
        client = OAuth2Session(client_id, None if public else client_secret, scope="openid",
                               redirect_uri=redirect_uri, code_challenge_method="S256",
                               token_endpoint_auth_method="none" if public else "client_secret_basic")
        verifier, nonce = generate_token(48), generate_token(20)
        url, state = client.create_authorization_url(metadata["authorization_endpoint"], nonce=nonce,
                                                     code_verifier=verifier)

        browser = requests.Session()
        callback, page = follow(browser, browser.get(url, allow_redirects=False))
        forms = Forms(page.text)
        sign_in = next(form for form in forms.forms if "user" in form["fields"])
        page = submit(browser, page, sign_in, user="alice")
        callback, page = follow(browser, page)
        forms = Forms(page.text)
        seen["code_shown"] = forms.code
        approval = subprocess.run([keyauth, "approve", "--pin-stdin"], input=forms.code + "\n", capture_output=True,
                                  text=True, timeout=60,
                                  env={"KEYAUTH_HOME": home, "HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        seen["approve_status"] = approval.returncode
        seen["approve_output"] = approval.stdout + approval.stderr
        continuation = next(form for form in forms.forms if form["id"] == "continue-form")
        callback, page = follow(browser, submit(browser, page, continuation))
        if callback is None:
            raise RuntimeError("no redirect to the application: %d %s" % (page.status_code, page.text[:500]))
        if public:
            browser.get(callback, timeout=10)
            callback = received["url"]
        seen["callback_state_matches"] = urllib.parse.parse_qs(urllib.parse.urlparse(callback).query)["state"] == [state]

        token = client.fetch_token(metadata["token_endpoint"], authorization_response=callback, code_verifier=verifier)
        seen["token_type"] = token["token_type"]
        jwks = JsonWebKey.import_key_set(requests.get(metadata["jwks_uri"], timeout=10).json())
        claims = jwt.decode(token["id_token"], jwks, claims_cls=CodeIDToken,
                            claims_options={"iss": {"essential": True, "value": metadata["issuer"]},
                                            "aud": {"essential": True, "value": client_id}},
                            claims_params={"nonce": nonce, "client_id": client_id,
                                           "access_token": token["access_token"]})
        claims.validate(leeway=5)
        seen["id_token"] = dict(claims)
        seen["id_token_alg"] = claims.header["alg"]
        seen["userinfo"] = client.get(metadata["userinfo_endpoint"], timeout=10).json()

        # The same code again, with the right verifier: refused, since a code is used once, and
        # the access token of its first use is revoked.
        try:
            client.fetch_token(metadata["token_endpoint"], authorization_response=callback, code_verifier=verifier)
            seen["second_use"] = "accepted"
        except OAuthError as error:
            seen["second_use"] = error.error
        seen["userinfo_after_reuse"] = client.get(metadata["userinfo_endpoint"], timeout=10).status_code

        if public:
            # RFC 8252 section 8.6: the browser is signed in, yet a public client's next request
            # (here on another port) gets the consent page naming the port, not a silent code;
            # Allow sends the code there.
            listener = http.server.HTTPServer(("127.0.0.1", 0), Callback)
            threading.Thread(target=listener.handle_request, daemon=True).start()
            port = "127.0.0.1:%d" % listener.server_port
            again = OAuth2Session(client_id, None, scope="openid", code_challenge_method="S256",
                                  redirect_uri=sys.argv[4].replace("127.0.0.1", port, 1),
                                  token_endpoint_auth_method="none")
            verifier = generate_token(48)
            url, state = again.create_authorization_url(metadata["authorization_endpoint"],
                                                        nonce=generate_token(20), code_verifier=verifier)
            page = browser.get(url, allow_redirects=False)
            seen["consent_status"] = page.status_code
            seen["consent_names_port"] = ("http://" + port) in page.text
            consent = next(form for form in Forms(page.text).forms if form["action"].endswith("/authorize/consent"))
            allowed = submit(browser, page, consent, decision="allow")
            browser.get(allowed.headers["Location"], timeout=10)
            query = urllib.parse.parse_qs(urllib.parse.urlparse(received["url"]).query)
            seen["consent_state_matches"] = query["state"] == [state]
            token = again.fetch_token(metadata["token_endpoint"], authorization_response=received["url"],
                                      code_verifier=verifier)
            seen["consent_id_token"] = bool(token.get("id_token"))
    except Exception as error:
        seen["failure"] = repr(error)
    print(json.dumps(seen))
    """#

@Suite(
    "Authlib, an independent OAuth client library, signs in through keyauth-server", .serialized,
    .timeLimit(.minutes(15)))
struct AuthlibClientTests {
    static var hasAuthlib: Bool {
        FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/authlib/__init__.py")
            && FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/requests/__init__.py")
    }

    /// Starts a server with alice's laptop registered, adds a client with `clients add ARGUMENTS
    /// --redirect-uri URI`, runs the application script for it, and returns the client and what
    /// the script saw.
    private func signIn(
        adding arguments: [String], redirectURI: String, server: KeyAuthServerProcess, directory: String
    ) throws -> (client: RegisteredClient, seen: JSONValue) {
        let laptop = Machine()
        defer { laptop.home.remove() }
        try #require(try laptop.register(server, user: "alice").status == 0)
        let client = try RegisteredClient(
            adding: arguments + ["--redirect-uri", redirectURI], database: directory + "/server.db")
        let seen = try runPythonScript(
            applicationScript,
            arguments: [server.url, client.id, client.secret ?? "-", redirectURI, Binaries.keyauth, laptop.home.path],
            in: directory, environment: ["AUTHLIB_INSECURE_TRANSPORT": "1"], timeout: 120)
        return (client, seen)
    }

    /// The checks both kinds of client share: what Authlib verified and what the server answered.
    private func expectSignedIn(_ seen: JSONValue, server: KeyAuthServerProcess, clientID: String) {
        #expect(seen["failure"] == nil, "\(seen) \(server.log)")
        #expect(seen["metadata_valid"] == .bool(true))
        #expect(seen["approve_status"] == .integer(0), "\(seen["approve_output"] ?? .null)")
        #expect(seen["callback_state_matches"] == .bool(true))
        #expect(seen["token_type"]?.stringValue?.lowercased() == "bearer")
        #expect(seen["id_token_alg"] == .string("RS256"))
        #expect(seen["id_token"]?["sub"] == .string("alice"))
        #expect(seen["id_token"]?["iss"] == .string(server.url))
        #expect(seen["id_token"]?["azp"] == .string(clientID))
        #expect(seen["id_token"]?["at_hash"]?.stringValue?.isEmpty == false)
        #expect(seen["userinfo"]?["sub"] == .string("alice"))
        #expect(seen["userinfo"]?["preferred_username"] == .string("alice"))
        #expect(seen["second_use"] == .string("invalid_grant"))
        #expect(seen["userinfo_after_reuse"] == .integer(401))
    }

    @Test(
        "a confidential client: Authlib's OAuth2Session with PKCE S256 gets an ID token it verifies with the JWKS, and /userinfo",
        .enabled(
            if: ExternalTools.shouldRun(installed: hasAuthlib), "python3-authlib or python3-requests is not installed"))
    func confidentialClient() throws {
        let directory = TemporaryDirectory("keyauth-authlib")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { _ = server.terminate() }
        let (client, seen) = try signIn(
            adding: ["Authlib app"], redirectURI: "https://app.example.com/callback", server: server,
            directory: directory.path)
        #expect(client.secret != nil)
        expectSignedIn(seen, server: server, clientID: client.id)
        #expect(seen["approve_output"]?.stringValue?.contains("Authlib app") == true)
        #expect(seen["approve_output"]?.stringValue?.contains("app.example.com") == true)
    }

    @Test(
        "a public client with a loopback redirect on a port it chose (RFC 8252) signs in with PKCE and no secret",
        .enabled(
            if: ExternalTools.shouldRun(installed: hasAuthlib), "python3-authlib or python3-requests is not installed"))
    func publicLoopbackClient() throws {
        let directory = TemporaryDirectory("keyauth-authlib-public")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { _ = server.terminate() }
        let (client, seen) = try signIn(
            adding: ["Desktop app", "--public"], redirectURI: "http://127.0.0.1/callback", server: server,
            directory: directory.path)
        #expect(client.secret == nil)
        expectSignedIn(seen, server: server, clientID: client.id)
        // Signed in, the next request of a public client needs the user's Allow (RFC 8252 8.6).
        #expect(seen["consent_status"] == .integer(200))
        #expect(seen["consent_names_port"] == .bool(true))
        #expect(seen["consent_state_matches"] == .bool(true))
        #expect(seen["consent_id_token"] == .bool(true))
    }
}
