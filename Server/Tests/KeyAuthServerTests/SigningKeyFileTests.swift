import Foundation
import Glibc
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// `--signing-key-file`: the operator keeps the signing key out of the database. The built
/// binary runs on the real clock, so the clients here sign on it too.
@Suite("The signing key from a file", .timeLimit(.minutes(10)))
struct SigningKeyFileTests {
    static let issuer = "http://keyauth.test"

    @Test(
        "with a key file, tokens are signed by it, the JWKS holds only it, and database keys neither sign nor verify")
    func signsWithTheFileKeyOnly() throws {
        let directory = TemporaryDirectory("keyauth-keyfile")
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        let device = try ServerTestKeys.key("alice-1")

        // A server without the file stores a key of its own and signs a token with it.
        let before = try Self.serve(database, in: directory)
        let tokenFromDatabaseKey: String
        do {
            defer { before.terminate() }
            let client = ServerClient(name: "database key", port: try before.waitUntilListening(), issuer: Self.issuer)
            #expect(try client.register(user: "alice", key: device).status == 201)
            tokenFromDatabaseKey = try client.accessToken(device)
        }
        let storage = try StorageFactory.open(database)
        defer { storage.close() }
        let storedKeys = try storage.signingKeys().map(\.kid)
        #expect(storedKeys.count == 1)
        #expect(StorageContractTests.MultiInstanceTests.keyID(of: tokenFromDatabaseKey) == storedKeys.first)

        let fileKey = try ServerTestKeys.key("signing-key-file")
        let keyFile = directory.path + "/signing-key.pem"
        try SecureFile.write(try fileKey.pkcs8PEM(), to: keyFile)
        let server = try Self.serve(database, in: directory, extra: ["--signing-key-file", keyFile])
        defer { server.terminate() }
        let client = ServerClient(name: "file key", port: try server.waitUntilListening(), issuer: Self.issuer)
        #expect(server.log.contains(", signing key \(keyFile))"))

        let published = try client.jwks()
        #expect(Array(published.keys) == [fileKey.publicKey.fingerprint])
        #expect(published[fileKey.publicKey.fingerprint] == .rsa(fileKey.publicKey))

        let token = try client.accessToken(device)
        #expect(StorageContractTests.MultiInstanceTests.keyID(of: token) == fileKey.publicKey.fingerprint)
        let verified = try StorageContractTests.MultiInstanceTests.verifyAccessToken(
            token, keys: [fileKey.publicKey.fingerprint: .rsa(fileKey.publicKey)])
        #expect(verified.subject == "alice")
        #expect(try client.authorized("GET", "/v1/devices", token: token).status == 200)

        // The database's key may be the one that leaked: its tokens no longer open anything.
        let refused = try client.authorized("GET", "/v1/devices", token: tokenFromDatabaseKey)
        #expect(refused.status == 401)
        #expect(refused.errorCode == "invalid_token")
        #expect(try storage.signingKeys().map(\.kid) == storedKeys)
    }

    @Test("a server started with a key file on a new database writes no key into it")
    func writesNoKey() throws {
        let directory = TemporaryDirectory("keyauth-keyfile")
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        let keyFile = directory.path + "/signing-key.pem"
        try SecureFile.write(try ServerTestKeys.key("signing-key-file").pkcs8PEM(), to: keyFile)
        let server = try Self.serve(database, in: directory, extra: ["--signing-key-file", keyFile])
        let client = ServerClient(name: "file key", port: try server.waitUntilListening(), issuer: Self.issuer)
        #expect(try client.register(user: "bob", key: try ServerTestKeys.key("bob-1")).status == 201)
        #expect(server.terminate() == 0)
        let storage = try StorageFactory.open(database)
        defer { storage.close() }
        #expect(try storage.signingKeys().isEmpty)
        #expect(try storage.allDevices().count == 1)
    }

    @Test(
        "an exposed, missing, linked, encrypted, empty, non-RSA, small or FIFO key file is refused with exit 65 naming it, before any database is created"
    )
    func unusableKeyFilesRefused() throws {
        let directory = TemporaryDirectory("keyauth-keyfile")
        defer { directory.remove() }
        let key = try ServerTestKeys.key("signing-key-file")
        let pem = try key.pkcs8PEM()
        let good = directory.path + "/good.pem"
        try SecureFile.write(pem, to: good)

        var cases: [(file: String, problem: String)] = []
        let exposed = directory.path + "/exposed.pem"
        try SecureFile.write(pem, to: exposed)
        chmod(exposed, 0o644)
        cases.append((exposed, "permissions 644 for \(exposed) are too open"))
        let groupReadable = directory.path + "/group.pem"
        try SecureFile.write(pem, to: groupReadable)
        chmod(groupReadable, 0o640)
        cases.append((groupReadable, "permissions 640 for \(groupReadable) are too open"))
        let missing = directory.path + "/missing.pem"
        cases.append((missing, "\(missing) does not exist"))
        let link = directory.path + "/link.pem"
        symlink(good, link)
        cases.append((link, "\(link) is a symbolic link"))
        let encrypted = directory.path + "/encrypted.pem"
        let weak = PINKeyEncryption(.pbkdf2HMACSHA256(iterations: 1000))
        try SecureFile.write(try key.pkcs8PEM(pin: SecretBytes(Array("1234".utf8)), encryption: weak), to: encrypted)
        cases.append((encrypted, "\(encrypted) is encrypted"))
        let empty = directory.path + "/empty.pem"
        try SecureFile.write([], to: empty)
        cases.append((empty, "\(empty) is empty; put an unencrypted PEM private key in it"))
        let publicKey = directory.path + "/public.pem"
        try SecureFile.write(Array(key.publicKey.pemRepresentation.utf8), to: publicKey)
        cases.append((publicKey, "\(publicKey) is not a PEM private key"))
        let small = directory.path + "/small.pem"
        try SecureFile.write(try ServerTestKeys.opensslKey(bits: 1024).pkcs8PEM(), to: small)
        cases.append((small, "\(small): RSA keys must have 2048 to 4096 bits, not 1024"))
        // A FIFO would make a blocking open wait for a writer, before any check, for good.
        let fifo = directory.path + "/fifo.pem"
        mkfifo(fifo, 0o600)
        cases.append((fifo, "\(fifo) is not a regular file"))
        if geteuid() == 0 {
            let foreign = directory.path + "/foreign.pem"
            try SecureFile.write(pem, to: foreign)
            chown(foreign, 65534, 65534)
            cases.append((foreign, "\(foreign) belongs to another user"))
        }

        for (file, problem) in cases {
            // The file is read first: a refused start has created no database.
            let database = directory.path + "/ka-\(UUID().uuidString).db"
            let server = try Self.serve(database, in: directory, extra: ["--signing-key-file", file])
            #expect(server.waitUntilExit() == 65, "\(file)")
            #expect(!FileManager.default.fileExists(atPath: database), "\(file)")
            let log = server.log
            #expect(log.hasPrefix("keyauth-server: --signing-key-file: "), "\(log)")
            #expect(log.contains(problem), "\(log)")
            #expect(log.split(separator: "\n").count == 1, "\(log)")
            #expect(!log.contains("PRIVATE KEY"))
        }
    }

    @Test(
        "with an ES256 key file the server warns that it cannot sign ID tokens; /authorize answers server_error and /bc-authorize refuses openid before any sign-in"
    )
    func nonRSAKeyFileRefusesAuthorization() throws {
        let directory = TemporaryDirectory("keyauth-keyfile")
        defer { directory.remove() }
        let database = directory.path + "/ka.db"
        let keyFile = directory.path + "/signing-key.pem"
        try SecureFile.write(try JWSPrivateKey.generate(for: .es256).pkcs8PEM(), to: keyFile)
        let server = try Self.serve(database, in: directory, extra: ["--signing-key-file", keyFile])
        defer { server.terminate() }
        let port = try server.waitUntilListening()
        #expect(server.logEventuallyContains("OpenID Connect ID tokens need RS256"), "\(server.log)")

        let storage = try StorageFactory.open(database)
        let redirect = "https://wiki.example.org/callback"
        let (client, _) = try ClientRegistry(storage: storage).add(name: "Wiki", redirectURIs: [redirect])
        let (desk, deskSecret) = try ClientRegistry(storage: storage).add(name: "Desk")
        storage.close()
        let pkce = try PKCE()
        var request = HTTPRequest(method: "GET", path: "/authorize")
        for (name, value) in OpenIDTestAPI.authorization(
            RelyingParty(id: client.id, secret: nil, redirectURI: redirect), pkce: pkce)
        {
            request.query[name] = TestAPI.formEncode(value)
        }
        let response = try SocketTransport(port: port).send(request)
        #expect(response.status == 303, "\(response.text)")
        let location = try #require(response.headers["Location"])
        #expect(location.hasPrefix(redirect + "?error=server_error&"), "\(location)")
        #expect(location.contains("state=state-1"))
        #expect(!response.text.contains("binding-code"))

        // CIBA: openid needs an ID token, so the request is refused before a device is asked;
        // without openid it goes on (to the unknown user here).
        func backchannel(scope: String) throws -> HTTPResponse {
            try SocketTransport(port: port).send(
                HTTPRequest(
                    method: "POST", path: "/bc-authorize",
                    headers: [
                        "Content-Type": "application/x-www-form-urlencoded",
                        "Authorization": TestClient(id: desk.id, secret: try #require(deskSecret)).basic,
                    ],
                    body: Array("login_hint=nobody&scope=\(TestAPI.formEncode(scope))".utf8)))
        }
        let openID = try backchannel(scope: "openid profile")
        #expect(openID.status == 400 && openID.errorCode == "invalid_request", "\(openID.text)")
        #expect(openID.errorDescription?.contains("RS256") == true)
        #expect(try backchannel(scope: "profile").errorCode == "unknown_user_id")
    }

    @Test("--signing-key-file and KEYAUTH_SERVER_SIGNING_KEY_FILE name the file; an empty one is a usage error")
    func parsing() throws {
        func file(_ arguments: [String], _ environment: [String: String]) throws -> String? {
            try serveConfiguration(arguments, environment).signingKeyFile
        }
        #expect(try file([], [:]) == nil)
        #expect(try file([], ["KEYAUTH_SERVER_SIGNING_KEY_FILE": "/run/credentials/k.pem"]) == "/run/credentials/k.pem")
        #expect(
            try file(["--signing-key-file", "/etc/k.pem"], ["KEYAUTH_SERVER_SIGNING_KEY_FILE": "/x"]) == "/etc/k.pem")
        #expect(throws: ServerConfigurationError.self) {
            _ = try ServerCommand.parse(arguments: ["--signing-key-file="], environment: [:])
        }
    }

    /// `keyauth-server serve` on `database` with the shared issuer, its log in `directory`; open
    /// enrollment, so that the tests register first devices without codes.
    static func serve(_ database: String, in directory: TemporaryDirectory, extra: [String] = []) throws
        -> KeyAuthServerProcess
    {
        try KeyAuthServerProcess(
            name: "keyfile",
            arguments: [
                "serve", "--listen", "127.0.0.1:0", "--db", database, "--issuer", issuer, "--quiet",
                "--enrollment", "open",
            ] + extra,
            logPath: directory.path + "/server-\(UUID().uuidString).log")
    }
}
