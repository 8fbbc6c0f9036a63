import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The built keyauth binary against a real keyauth-server", .serialized, .timeLimit(.minutes(10)))
struct EndToEndTests {
    @Test("a second device registers pending, the first approves it, and the second logs in")
    func twoDeviceApproval() throws {
        try withServer { server in
            let laptop = Machine()
            let desktop = Machine()
            defer {
                laptop.home.remove()
                desktop.home.remove()
            }
            // Approving a device needs a presence check on the approving one: the laptop has a PIN.
            let first = try laptop.register(server, user: "alice", extra: ["--name", "laptop"], pin: "246813")
            #expect(first.status == 0, "\(first.standardError)")

            let second = try desktop.register(server, user: "alice", extra: ["--name", "desktop", "--no-wait"])
            #expect(second.status == 75, "\(second.standardError)")
            let status = try desktop.run(["status", "--json"])
            let account = try #require(try JSONValue(parsing: status.standardOutput)["accounts"]?.arrayValue?.first)
            #expect(account["status"]?.stringValue == "pending")
            let keyID = try #require(account["kid"]?.stringValue)
            #expect(second.standardError.contains("keyauth devices approve \(keyID.prefix(8))"))
            #expect(!second.standardError.contains("\u{1B}"))

            let early = try desktop.run(["login", "--no-wait"])
            #expect(early.status == 75)
            expectOneErrorLine(early)

            let list = try laptop.run(["devices", "list", "--json", "--pin-stdin"], standardInput: "246813\n")
            #expect(list.status == 0, "\(list.standardError)")
            let devices = try #require(try JSONValue(parsing: list.standardOutput)["devices"]?.arrayValue)
            #expect(devices.contains { $0["kid"]?.stringValue == keyID && $0["status"]?.stringValue == "pending" })

            let approve = try laptop.run(["devices", "approve", keyID, "--pin-stdin"], standardInput: "246813\n")
            #expect(approve.status == 0, "\(approve.standardError)")
            let login = try desktop.run(["login"])
            #expect(login.status == 0, "\(login.standardError)")
            let token = try desktop.run(["token"])
            #expect(token.status == 0)
            let claims = try CompactJWS(parsing: token.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
                .claims()
            #expect(claims["sub"]?.stringValue == "alice")
            // `keyauth token` prints a Bearer token where proofs are optional: the device is its client_id.
            #expect(claims["client_id"]?.stringValue == keyID)
            #expect(claims["cnf"] == nil)
        }
    }

    @Test("the right PIN logs in, a wrong one exits 77 without showing it")
    func pinRightAndWrong() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "bob", pin: "482604")
            #expect(registered.status == 0, "\(registered.standardError)")
            let wrong = try machine.run(["login", "--pin-stdin"], standardInput: "111111\n")
            #expect(wrong.status == 77)
            expectOneErrorLine(wrong)
            #expect(!wrong.standardError.contains("111111"))
            let right = try machine.run(["login", "--pin-stdin"], standardInput: "482604\n")
            #expect(right.status == 0, "\(right.standardError)")
            #expect(!right.standardOutput.contains("482604"))
        }
    }

    @Test("a private key file with mode 0644 is refused with exit 65")
    func unprotectedKey() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "carol").status == 0)
            chmod(try machine.keyDirectory() + "/device-key.pem", 0o644)
            let result = try machine.run(["login"])
            #expect(result.status == 65)
            expectOneErrorLine(result)
        }
    }

    @Test("a corrupt private key file exits 65")
    func corruptKey() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "dave").status == 0)
            let path = try machine.keyDirectory() + "/device-key.pem"
            try Data("-----BEGIN PRIVATE KEY-----\nAAAA\n".utf8).write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
            let result = try machine.run(["login"])
            #expect(result.status == 65)
            expectOneErrorLine(result)
        }
    }

    @Test("reset revokes the key on the server, so a saved copy of it can no longer log in")
    func resetRevokes() throws {
        try withServer { server in
            let machine = Machine()
            let thief = Machine()
            defer {
                machine.home.remove()
                thief.home.remove()
            }
            #expect(try machine.register(server, user: "erin").status == 0)
            // Keep a copy of the whole account, as someone who stole the files would.
            try FileManager.default.copyItem(
                atPath: machine.home.path + "/accounts", toPath: thief.home.path + "/accounts")
            try FileManager.default.removeItem(
                atPath: thief.home.path + "/accounts/" + (try machine.accounts.resolve(nil)) + "/token.json")
            let reset = try machine.run(["reset"])
            #expect(reset.status == 0, "\(reset.standardError)")
            #expect(machine.accounts.accountNames().isEmpty)
            let stolen = try thief.run(["login"])
            #expect(stolen.status == 77)
            expectOneErrorLine(stolen)
        }
    }

    @Test("token prints the stored token until it nearly expires, then logs in again")
    func tokenCachedAndRefreshed() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "frank", pin: "258025").status == 0)
            // No PIN on standard input: a cached token must not need one.
            let cached = try machine.run(["token", "--pin-stdin"])
            #expect(cached.status == 0, "\(cached.standardError)")
            let again = try machine.run(["token", "--pin-stdin"])
            #expect(again.standardOutput == cached.standardOutput)

            let name = try machine.accounts.resolve(nil)
            let stored = try #require(try machine.accounts.credentials.loadToken(account: name))
            try machine.accounts.credentials.saveToken(
                AccessToken(value: stored.value, expiresAt: Date().addingTimeInterval(20)), account: name)
            let withoutPIN = try machine.run(["token", "--pin-stdin"])
            #expect(withoutPIN.status == 77)
            let refreshed = try machine.run(["token", "--pin-stdin"], standardInput: "258025\n")
            #expect(refreshed.status == 0, "\(refreshed.standardError)")
            #expect(refreshed.standardOutput != cached.standardOutput)
            #expect(refreshed.standardOutput.hasSuffix("\n"))
        }
    }

    @Test("where DPoP is optional, token prints a Bearer token that curl can use as it is")
    func bearerWhereDPoPIsOptional() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "heidi").status == 0)
            let token = try machine.run(["token"])
            #expect(token.status == 0, "\(token.standardError)")
            #expect(token.standardError.isEmpty)
            let stored = try machine.accounts.credentials.loadToken(account: try machine.accounts.resolve(nil))
            #expect(stored?.tokenType == "Bearer")
            let value = token.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            let answer = try curl(server.url + "/v1/devices", ["-H", "Authorization: Bearer " + value])
            #expect(answer.status == 200, "\(answer.body)")
            #expect(try machine.run(["devices"]).status == 0)
        }
    }

    @Test("where DPoP is required with nonces, the CLI binds its token, and token plus proof work from curl once")
    func dpopRequiredWithNonces() throws {
        try withServer(extraArguments: ["--dpop", "required", "--dpop-nonce"]) { server in
            let machine = Machine()
            defer { machine.home.remove() }
            let registered = try machine.register(server, user: "ivan")
            #expect(registered.status == 0, "\(registered.standardError)")
            let stored = try machine.accounts.credentials.loadToken(account: try machine.accounts.resolve(nil))
            #expect(stored?.tokenType == "DPoP")
            // Proofs are signed per request, with the nonce the login learned.
            let devices = try machine.run(["devices", "--json"])
            #expect(devices.status == 0, "\(devices.standardError)")
            #expect(
                devices.standardOutput.contains(
                    try machine.accounts.keyPairStore(for: try machine.accounts.resolve(nil)).loadPublicKey()
                        .fingerprint))

            let token = try machine.run(["token"])
            #expect(token.status == 0)
            #expect(token.standardError.contains("keyauth proof"))
            let value = token.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(value == stored?.value)
            let url = server.url + "/v1/devices"
            let asBearer = try curl(url, ["-H", "Authorization: Bearer " + value])
            #expect(asBearer.status == 401)

            let first = try machine.run(["proof", "GET", url])
            #expect(first.status == 0, "\(first.standardError)")
            let withoutNonce = try curl(
                url, ["-H", "Authorization: DPoP " + value, "-H", "DPoP: " + first.standardOutput.trimmed])
            #expect(withoutNonce.status == 401)
            #expect(withoutNonce.body.contains("use_dpop_nonce"))
            let nonce = try #require(withoutNonce.headers["dpop-nonce"])
            let proof = try machine.run(["proof", "GET", url, "--nonce", nonce])
            #expect(proof.status == 0)
            let headers = ["-H", "Authorization: DPoP " + value, "-H", "DPoP: " + proof.standardOutput.trimmed]
            let allowed = try curl(url, headers)
            #expect(allowed.status == 200, "\(allowed.body)")
            let replayed = try curl(url, headers)
            #expect(replayed.status == 401)
            #expect(replayed.body.contains("invalid_dpop_proof"))
            let otherMethod = try machine.run(["proof", "DELETE", url, "--nonce", nonce])
            let wrongMethod = try curl(
                url, ["-H", "Authorization: DPoP " + value, "-H", "DPoP: " + otherMethod.standardOutput.trimmed])
            #expect(wrongMethod.status == 401)
            #expect(try machine.run(["proof", "get", url]).status == 64)
        }
    }

    @Test(
        "the example service allows a Bearer token and refuses a missing, altered, foreign or repeated one with the reason"
    )
    func exampleServiceBearer() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "judy").status == 0)
            let token = try machine.run(["token"]).standardOutput.trimmed
            let keyID = try machine.accounts.keyPairStore(for: try machine.accounts.resolve(nil)).loadPublicKey()
                .fingerprint
            let allowed = try exampleService(server, ["Authorization: Bearer " + token])
            #expect(allowed.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(allowed)")
            #expect(allowed.hasSuffix("allowed: judy, Bearer from device \(keyID), amr [\"swk\"]\n"))

            let twice = try exampleService(
                server, ["Authorization: Bearer " + token, "Authorization: Bearer " + token])
            #expect(twice.hasPrefix("HTTP/1.1 400 "), "two credentials are refused: \(twice)")
            #expect(twice.contains("refused: a request carries at most one Authorization header"))
            let missing = try exampleService(server, [])
            #expect(missing.hasPrefix("HTTP/1.1 401 "))
            #expect(missing.contains("refused: the request has no Authorization header"))
            var altered = Array(token)
            altered[altered.count - 5] = altered[altered.count - 5] == "A" ? "B" : "A"
            let forged = try exampleService(server, ["Authorization: Bearer " + String(altered)])
            #expect(forged.hasPrefix("HTTP/1.1 401 "))
            #expect(forged.contains("refused: "))
            #expect(!forged.contains(token))
            let otherIssuer = try exampleService(
                server, ["Authorization: Bearer " + token], issuer: "http://127.0.0.1:1")
            #expect(otherIssuer.hasPrefix("HTTP/1.1 503 "), "\(otherIssuer)")
        }
    }

    @Test("the example service checks a DPoP-bound token's proof: right request allowed, Bearer or wrong URL refused")
    func exampleServiceDPoP() throws {
        try withServer(extraArguments: ["--dpop", "required"]) { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "kim").status == 0)
            let token = try machine.run(["token"]).standardOutput.trimmed
            let url = "https://api.example.test/orders"
            let proof = try machine.run(["proof", "GET", url + "?page=2"]).standardOutput.trimmed
            let allowed = try exampleService(
                server, ["Authorization: DPoP " + token, "DPoP: " + proof], path: "/orders?page=2")
            #expect(allowed.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(allowed)")
            #expect(allowed.contains("allowed: kim, DPoP-bound to device "))

            let asBearer = try exampleService(server, ["Authorization: Bearer " + token, "DPoP: " + proof])
            #expect(asBearer.hasPrefix("HTTP/1.1 401 "))
            #expect(asBearer.contains("refused: "))
            let otherURL = try machine.run(["proof", "GET", "https://api.example.test/admin"]).standardOutput.trimmed
            let misdirected = try exampleService(server, ["Authorization: DPoP " + token, "DPoP: " + otherURL])
            #expect(misdirected.hasPrefix("HTTP/1.1 401 "))
            #expect(misdirected.contains(#"WWW-Authenticate: DPoP error="invalid_dpop_proof""#))
            let noProof = try exampleService(server, ["Authorization: DPoP " + token])
            #expect(noProof.hasPrefix("HTTP/1.1 401 "))
            // A proof another service received, replayed with a target that would move the
            // origin to that service's if the URL were joined as strings.
            let elsewhere = try machine.run(["proof", "GET", "https://api.example.test.evil.test/orders"])
                .standardOutput.trimmed
            for target in [".evil.test/orders", ":8443/orders"] {
                let moved = try exampleService(
                    server, ["Authorization: DPoP " + token, "DPoP: " + elsewhere], path: target)
                #expect(moved.hasPrefix("HTTP/1.1 400 "), "\(moved)")
                #expect(!moved.contains("allowed"))
            }

            // With no stored token, proof logs in first, so that the token printed after it matches.
            try machine.accounts.credentials.deleteToken(account: try machine.accounts.resolve(nil))
            let firstProof = try machine.run(["proof", "GET", url])
            #expect(firstProof.status == 0, "\(firstProof.standardError)")
            let newToken = try machine.run(["token"]).standardOutput.trimmed
            #expect(newToken != token)
            let afterLogin = try exampleService(
                server, ["Authorization: DPoP " + newToken, "DPoP: " + firstProof.standardOutput.trimmed])
            #expect(afterLogin.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(afterLogin)")
        }
    }

    @Test("status --json is a parseable document with fingerprints and token expiry")
    func statusJSON() throws {
        try withServer { server in
            let machine = Machine()
            defer { machine.home.remove() }
            #expect(try machine.register(server, user: "grace").status == 0)
            let result = try machine.run(["status", "--json"])
            #expect(result.status == 0)
            #expect(result.standardError.isEmpty)
            let document = try JSONValue(parsing: result.standardOutput)
            let account = try #require(document["accounts"]?.arrayValue?.first)
            let publicKey = try machine.accounts.keyPairStore(for: try machine.accounts.resolve(nil)).loadPublicKey()
            #expect(account["kid"]?.stringValue == publicKey.fingerprint)
            #expect(account["token_expires_at"]?.stringValue != nil)
            #expect(account["server"]?.stringValue == server.url)
        }
    }

    @Test("a stopped server gives exit 69, and reset --local-only still works")
    func serverDown() throws {
        let machine = Machine()
        defer { machine.home.remove() }
        var serverPort: UInt16 = 0
        try withServer { server in
            let registered = try machine.register(server, user: "heidi")
            #expect(registered.status == 0, "\(registered.standardError)")
            serverPort = server.port
        }
        let closed = ClosedPort(port: serverPort)
        defer { withExtendedLifetime(closed) {} }
        let login = try machine.run(["login"])
        #expect(login.status == 69)
        expectOneErrorLine(login)
        let reset = try machine.run(["reset"])
        #expect(reset.status == 69)
        #expect(try machine.run(["reset", "--local-only"]).status == 0)
        #expect(machine.accounts.accountNames().isEmpty)
    }
}

extension String {
    /// Without the line end a command prints.
    fileprivate var trimmed: String { trimmingCharacters(in: .whitespacesAndNewlines) }
}

/// What curl got: the status, lower-cased header names, and the body.
private struct CurlAnswer {
    let status: Int
    let headers: [String: String]
    let body: String
}

/// Sends a GET with `headers` (curl arguments) through curl, the way a script would.
private func curl(_ url: String, _ headers: [String]) throws -> CurlAnswer {
    let result = try runProcess(
        "/usr/bin/curl", ["-s", "-i", "--max-time", "10"] + headers + [url], environment: ["PATH": "/usr/bin:/bin"])
    let parts = result.standardOutput.components(separatedBy: "\r\n\r\n")
    let head = parts.first?.components(separatedBy: "\r\n") ?? []
    let statusLine = head.first?.split(separator: " ") ?? []
    var fields: [String: String] = [:]
    for line in head.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return CurlAnswer(
        status: statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0, headers: fields,
        body: parts.dropFirst().joined(separator: "\r\n\r\n"))
}

/// Runs the example service on one GET request with `headers`, for the public URL
/// `https://api.example.test`, and returns its whole answer.
private func exampleService(
    _ server: KeyAuthServerProcess, _ headers: [String], path: String = "/orders", issuer: String? = nil
) throws -> String {
    let request = (["GET \(path) HTTP/1.1", "Host: api.example.test"] + headers).joined(separator: "\r\n") + "\r\n\r\n"
    let result = try runProcess(
        Binaries.exampleService,
        ["--issuer", issuer ?? server.url, "--public-url", "https://api.example.test"],
        environment: ["PATH": "/usr/bin:/bin"], standardInput: request)
    #expect(result.status == 0, "\(result.standardError)")
    return result.standardOutput
}
