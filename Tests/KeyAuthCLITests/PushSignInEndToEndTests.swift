import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// A client application of push sign-in as a third party writes one: Python's standard library
/// for HTTP and PyJWT to verify the token against the server's JWKS. It starts a request for
/// alice, writes its `auth_req_id` to a file, polls at the interval the server asks for, and
/// prints one JSON line: the verified claims, or the error that ended the polling.
private let applicationScript = #"""
    import base64, json, sys, time, urllib.error, urllib.parse, urllib.request
    import jwt

    server, client_id, secret, user, binding, id_file = sys.argv[1:7]
    basic = "Basic " + base64.b64encode(
        (urllib.parse.quote(client_id, safe="") + ":" + urllib.parse.quote(secret, safe="")).encode()).decode()

    def post(path, form):
        request = urllib.request.Request(server + path, data=urllib.parse.urlencode(form).encode(),
                                         headers={"Authorization": basic})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    status, started = post("/bc-authorize", {"login_hint": user, "binding_message": binding,
                                             "requested_expiry": "60"})
    if status != 200:
        print(json.dumps({"error": "bc-authorize", "status": status, "body": started}))
        sys.exit(1)
    with open(id_file, "w") as handle:
        handle.write(started["auth_req_id"])
    interval = started["interval"]
    deadline = time.time() + started["expires_in"]
    while time.time() < deadline:
        time.sleep(interval)
        status, answer = post("/oauth/token", {"grant_type": "urn:openid:params:grant-type:ciba",
                                               "auth_req_id": started["auth_req_id"]})
        if status == 200:
            jwks = jwt.PyJWKClient(server + "/.well-known/jwks.json")
            key = jwks.get_signing_key_from_jwt(answer["access_token"])
            claims = jwt.decode(answer["access_token"], key.key, algorithms=["RS256"], audience=client_id,
                                issuer=server, options={"require": ["exp", "iat", "sub", "aud", "iss"]})
            header = jwt.get_unverified_header(answer["access_token"])
            print(json.dumps({"claims": claims, "typ": header["typ"], "interval": interval}))
            sys.exit(0)
        if answer.get("error") == "slow_down":
            interval += 5
        elif answer.get("error") != "authorization_pending":
            print(json.dumps({"error": answer.get("error")}))
            sys.exit(0)
    print(json.dumps({"error": "timeout"}))
    """#

/// The application script running in the background, and its one line of output when it ends.
private final class Application: Sendable {
    private let result = Mutex<Result<CommandResult, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)
    let idFile: String

    init(directory: String, server: String, client: (id: String, secret: String), binding: String) throws {
        let script = directory + "/application-\(binding).py"
        idFile = directory + "/auth-req-id-\(binding)"
        try applicationScript.write(toFile: script, atomically: true, encoding: .utf8)
        let arguments = [script, server, client.id, client.secret, "alice", binding, idFile]
        Thread.detachNewThread { [self] in
            let outcome = Result {
                try runProcess(
                    "/usr/bin/python3", arguments, environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"],
                    timeout: 120)
            }
            result.withLock { $0 = outcome }
            done.signal()
        }
    }

    /// The request's id, once the script has it; when the script ends without one, the failure
    /// carries `serverLog` too, so that a refusal (a 503 names only a storage failure) can be
    /// traced to its cause.
    func requestID(timeout: TimeInterval = 30, serverLog: @autoclosure () -> String) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let id = try? String(contentsOfFile: idFile, encoding: .utf8), !id.isEmpty { return id }
            if let failed = try result.withLock({ $0 })?.get() {
                throw TestFailure(
                    "the application ended early: \(failed.standardOutput) \(failed.standardError)\n"
                        + "server log:\n\(serverLog())")
            }
            usleep(50_000)
        }
        throw TestFailure("the application did not start a request")
    }

    /// The script's JSON line after it ended.
    func outcome() throws -> JSONValue {
        // runProcess stops the script after 120 s; the margin covers its stop.
        guard done.wait(timeout: .now() + 150) == .success else { throw TestFailure("the application never ended") }
        let finished = try #require(try result.withLock { $0 }?.get())
        #expect(finished.status == 0, "\(finished.standardError)")
        return try JSONValue(parsing: finished.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}

/// A server of the built binary, alice registered on one device with a PIN, and a client
/// application registered with the admin command.
private struct PushSetup {
    let directory: TemporaryDirectory
    let home: TemporaryDirectory
    let server: KeyAuthServerProcess
    let environment: [String: String]
    let client: (id: String, secret: String)
    let keyID: String
    let pin = "correct horse"

    init(name: String, clientName: String) throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"))
        directory = TemporaryDirectory("keyauth-\(name)")
        home = TemporaryDirectory("keyauth-\(name)-home")
        server = try KeyAuthServerProcess.started(in: directory.path)
        environment = [
            "KEYAUTH_HOME": home.path, "HOME": home.path, "PATH": "/usr/bin:/bin", "KEYAUTH_TIMEOUT": "10",
            "LANG": "C.UTF-8",
        ]
        let registered = try runProcess(
            Binaries.keyauth, ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin"],
            environment: environment, standardInput: pin + "\n")
        try #require(registered.status == 0, "\(registered.standardError)")
        let status = try JSONValue(
            parsing: try runProcess(Binaries.keyauth, ["status", "--json"], environment: environment).standardOutput)
        keyID = try #require(status["accounts"]?.arrayValue?.first?["kid"]?.stringValue)
        let added = try KeyAuthServerProcess.runCommand(
            ["clients", "add", clientName, "--db", directory.path + "/server.db"])
        try #require(added.status == 0, "\(added.error)")
        var printed: [String: String] = [:]
        for line in added.output.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { printed[String(parts[0])] = String(parts[1]) }
        }
        client = (id: try #require(printed["client_id"]), secret: try #require(printed["client_secret"]))
    }

    /// Stops the server and removes the directories.
    func tearDown() {
        _ = server.terminate()
        directory.remove()
        home.remove()
    }

    /// The built `keyauth` as alice's device.
    func keyauth(_ arguments: [String], input: String = "") throws -> CommandResult {
        try runProcess(Binaries.keyauth, arguments, environment: environment, standardInput: input)
    }
}

@Suite(
    "Push sign-in end to end: an application, keyauth-server and keyauth approve", .serialized, .timeLimit(.minutes(15))
)
struct PushSignInEndToEndTests {
    @Test(
        "an application's request is approved with keyauth approve (code typed, PIN), and PyJWT verifies the token; a denied one gets access_denied"
    )
    func approveAndDeny() throws {
        let setup = try PushSetup(name: "push", clientName: "Test application")
        defer { setup.tearDown() }
        let (server, directory, client, keyID, pin) = (
            setup.server, setup.directory, setup.client, setup.keyID, setup.pin
        )
        func keyauth(_ arguments: [String], input: String = "") throws -> CommandResult {
            try setup.keyauth(arguments, input: input)
        }

        // Approve: the device lists the request, a mistyped code approves nothing and asks again.
        let approved = try Application(directory: directory.path, server: server.url, client: client, binding: "4711")
        let id = try approved.requestID(serverLog: server.log)
        let listed = try keyauth(["requests", "--pin-stdin"])
        #expect(listed.status == 0, "\(listed.standardError)")
        #expect(listed.standardOutput.contains(id) && listed.standardOutput.contains("Test application"))
        // Number matching: the code is on the application's screen only, never on the device.
        #expect(!listed.standardOutput.contains("4711"))
        let approval = try keyauth(["approve", "--pin-stdin"], input: "1234\n4711\n\(pin)\n")
        try #require(approval.status == 0, "\(approval.standardError)")
        #expect(approval.standardError.contains("not the code"))
        #expect(approval.standardError.contains("Test application") && approval.standardError.contains("127.0.0.1"))
        #expect(approval.standardOutput.contains("Approved the sign-in to Test application"))
        #expect(!approval.standardError.contains("4711") && !approval.standardOutput.contains("4711"))
        #expect(!approval.standardOutput.contains(pin) && !approval.standardError.contains(pin))
        let outcome = try approved.outcome()
        let claims = try #require(outcome["claims"], "\(outcome)")
        #expect(outcome["typ"] == .string("at+jwt"))
        #expect(claims["sub"] == .string("alice"))
        #expect(claims["aud"] == .string(client.id))
        #expect(claims["client_id"] == .string(client.id))
        #expect(claims["amr"] == .array(["swk", "pin"]))
        #expect(claims["acr"] == .string("urn:keyauth:acr:device-key+presence"))
        #expect(claims["device_jkt"] == .string(keyID))
        #expect(claims["cnf"] == nil)

        // Answering it again: it was answered, exit 1 with a message that says so.
        let again = try keyauth(["deny", id, "--pin-stdin"])
        #expect(again.status == 1)
        #expect(again.standardError.contains("already answered"))

        // Deny: the application learns access_denied.
        let denied = try Application(directory: directory.path, server: server.url, client: client, binding: "0815")
        let deniedID = try denied.requestID(serverLog: server.log)
        let denial = try keyauth(["deny", deniedID, "--pin-stdin"])
        try #require(denial.status == 0, "\(denial.standardError)")
        #expect(try denied.outcome()["error"] == .string("access_denied"))

        // A wrong PIN approves nothing: exit 77, and the request stays open.
        let third = try Application(directory: directory.path, server: server.url, client: client, binding: "2222")
        let thirdID = try third.requestID(serverLog: server.log)
        let wrongPIN = try keyauth(["approve", thirdID, "--pin-stdin"], input: "2222\nwrong pin\n")
        #expect(wrongPIN.status == 77, "\(wrongPIN.standardError)")
        #expect(try keyauth(["requests", "--pin-stdin"]).standardOutput.contains(thirdID))
        try #require(try keyauth(["deny", thirdID, "--pin-stdin"]).status == 0)
        #expect(try third.outcome()["error"] == .string("access_denied"))
        // No request left: approve says so and exits 1.
        let none = try keyauth(["approve", "--pin-stdin"], input: "")
        #expect(none.status == 1)
        #expect(none.standardError.contains("no sign-in request is waiting"))
    }

    @Test(
        "number matching: the device never shows the code, deny denies, three wrong codes deny, and a binding message that reads as a refusal is refused"
    )
    func numberMatching() throws {
        let setup = try PushSetup(name: "matching", clientName: "Desk")
        defer { setup.tearDown() }
        let (server, directory, client, pin) = (setup.server, setup.directory, setup.client, setup.pin)
        func keyauth(_ arguments: [String], input: String = "") throws -> CommandResult {
            try setup.keyauth(arguments, input: input)
        }
        let environment = setup.environment

        // A client cannot make a refusal the code: binding_message=deny would have approved when
        // the user typed deny.
        for refusal in ["deny", "Deny ", "NO", "cancel"] {
            let started = try runProcess(
                "/usr/bin/curl",
                [
                    "-s", "-u", "\(client.id):\(client.secret)", "--data-urlencode", "login_hint=alice",
                    "--data-urlencode", "binding_message=\(refusal)", server.url + "/bc-authorize",
                ], environment: environment)
            #expect(started.standardOutput.contains("invalid_binding_message"), "\(refusal): \(started.standardOutput)")
        }

        // Typing deny denies, never approves, whatever the code is.
        let denied = try Application(directory: directory.path, server: server.url, client: client, binding: "5150")
        let deniedID = try denied.requestID(serverLog: server.log)
        let typedDeny = try keyauth(["approve", deniedID, "--pin-stdin"], input: "deny\n")
        #expect(typedDeny.status == 0, "\(typedDeny.standardError)")
        #expect(typedDeny.standardOutput.contains("Denied"))
        #expect(try denied.outcome()["error"] == .string("access_denied"))

        // The device shows neither the code nor anything but who asks, from where and when; three
        // wrong codes deny the request, and the PIN is never asked.
        let guessed = try Application(directory: directory.path, server: server.url, client: client, binding: "8642")
        let guessedID = try guessed.requestID(serverLog: server.log)
        let guesses = try keyauth(["approve", guessedID, "--pin-stdin"], input: "1111\n2222\n3333\n\(pin)\n")
        #expect(guesses.status == 1, "\(guesses.standardError)")
        #expect(!guesses.standardError.contains("8642") && !guesses.standardOutput.contains("8642"))
        #expect(guesses.standardError.contains("2 attempts left") && guesses.standardError.contains("1 attempt left"))
        #expect(guesses.standardError.contains("last attempt"))
        #expect(try guessed.outcome()["error"] == .string("access_denied"))
        let audit = try KeyAuthServerProcess.runCommand(["audit", "--db", directory.path + "/server.db"])
        #expect(audit.output.contains("deny-sign-in") && audit.output.contains("3 wrong codes"), "\(audit.output)")
        #expect(audit.output.contains("client:\(client.id)"), "\(audit.output)")
    }
}
