import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@Suite("KeyPairStore")
struct KeyPairStoreTests {
    private func mode(_ path: String) -> mode_t {
        var info = stat()
        stat(path, &info)
        return info.st_mode & 0o777
    }

    private func code(_ body: () throws -> Void) -> KeyAuthError.Code? {
        caught(body)?.code
    }

    private func caught(_ body: () throws -> Void) -> KeyAuthError? {
        do {
            try body()
            return nil
        } catch {
            return error as? KeyAuthError
        }
    }

    @Test("stores a new key 0600 in a 0700 directory and loads the same key back")
    func storeAndLoad() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path + "/nested/keys")
        #expect(!store.hasKey)
        try store.store(TestKeys.first)
        #expect(store.hasKey)
        #expect(mode(store.directory) == 0o700)
        #expect(mode(store.privateKeyPath) == 0o600)
        #expect(mode(store.publicKeyPath) == 0o600)
        let loaded = try store.loadPrivateKey()
        #expect(loaded.publicKey == TestKeys.first.publicKey)
        #expect(try store.loadPublicKey().fingerprint == TestKeys.first.publicKey.fingerprint)
        #expect(try !store.isEncrypted())
        let pem = try String(contentsOfFile: store.privateKeyPath, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
    }

    @Test("an existing directory of ours with loose permissions is tightened to 0700")
    func tightensDirectory() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        chmod(temporary.path, 0o755)
        try KeyPairStore(directory: temporary.path).store(TestKeys.first)
        #expect(mode(temporary.path) == 0o700)
    }

    @Test("generates RSA keys of the default 3072 bits with exponent 65537")
    func generatesDefaultSize() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let key = try KeyPairStore(directory: temporary.path).createKey()
        #expect(key.publicKey.bits == 3072)
        #expect(key.publicKey.exponent == [1, 0, 1])
        #expect(code { _ = try RSAPrivateKey.generate(bits: 1024) } == .invalidArgument)
    }

    @Test("refuses to create a second key")
    func refusesSecondKey() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first)
        #expect(code { try store.store(TestKeys.second) } == .keyExists)
        #expect(try store.loadPrivateKey().publicKey == TestKeys.first.publicKey)
    }

    @Test("two concurrent creators leave exactly one key, and it is one of theirs")
    func concurrentCreators() async throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        let keys = [TestKeys.first, TestKeys.second]
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for key in keys { group.addTask { (try? store.store(key)) != nil } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 }.count == 1)
        let stored = try store.loadPrivateKey().publicKey
        #expect(keys.map(\.publicKey).contains(stored))
        #expect(try store.loadPublicKey() == stored)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: temporary.path).filter {
            $0.hasPrefix(".tmp")
        }
        #expect(leftovers.isEmpty)
    }

    @Test("a key file readable by the group or others is refused as unprotected")
    func refusesLoosePermissions() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first)
        chmod(store.privateKeyPath, 0o644)
        let error = caught { _ = try store.loadPrivateKey() }
        #expect(error?.code == .keyUnprotected)
        #expect(error?.message.contains(store.privateKeyPath) == true)
        #expect(error?.message.contains("UNPROTECTED") == true)
        chmod(store.privateKeyPath, 0o640)
        #expect(code { _ = try store.loadPrivateKey() } == .keyUnprotected)
        chmod(store.privateKeyPath, 0o600)
        #expect(code { _ = try store.loadPrivateKey() } == nil)
    }

    @Test("a symlinked key file is refused")
    func refusesSymlink() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let real = KeyPairStore(directory: temporary.path + "/real")
        try real.store(TestKeys.first)
        let linked = KeyPairStore(directory: temporary.path + "/linked")
        try FileManager.default.createDirectory(atPath: linked.directory, withIntermediateDirectories: true)
        symlink(real.privateKeyPath, linked.privateKeyPath)
        #expect(code { _ = try linked.loadPrivateKey() } == .keyUnprotected)
    }

    @Test("a key owned by another user is refused")
    func refusesOtherOwner() throws {
        guard geteuid() == 0 else { return }  // only root can give a file away
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first)
        #expect(chown(store.privateKeyPath, 65534, 65534) == 0)
        #expect(code { _ = try store.loadPrivateKey() } == .keyUnprotected)
    }

    @Test("a truncated or garbage key file is a corrupt-key error, and a missing one is not-found")
    func corruptFiles() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        #expect(code { _ = try store.loadPrivateKey() } == .keyNotFound)
        try store.store(TestKeys.first)
        let pem = try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath))
        try pem.prefix(pem.count / 2).write(to: URL(fileURLWithPath: store.privateKeyPath))
        chmod(store.privateKeyPath, 0o600)
        #expect(code { _ = try store.loadPrivateKey() } == .keyCorrupt)
        try Data("not a key at all\n".utf8).write(to: URL(fileURLWithPath: store.privateKeyPath))
        #expect(code { _ = try store.loadPrivateKey() } == .keyCorrupt)
        try Data().write(to: URL(fileURLWithPath: store.privateKeyPath))
        #expect(code { _ = try store.loadPrivateKey() } == .keyCorrupt)
    }

    @Test("a PIN encrypts the key with PBES2, and a wrong PIN is its own error")
    func pinEncryption() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first, pin: SecretBytes(utf8: "2468"))
        #expect(try store.isEncrypted())
        let pem = try String(contentsOfFile: store.privateKeyPath, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        #expect(try store.loadPrivateKey(pin: SecretBytes(utf8: "2468")).publicKey == TestKeys.first.publicKey)
        #expect(code { _ = try store.loadPrivateKey(pin: SecretBytes(utf8: "1357")) } == .wrongPIN)
        #expect(code { _ = try store.loadPrivateKey() } == .wrongPIN)
        // Without the PIN, the public key is still there for `pubkey` and `status`.
        #expect(try store.loadPublicKey() == TestKeys.first.publicKey)
    }

    @Test("the encrypted key uses PBKDF2-HMAC-SHA256 with 600,000 rounds and AES-256-CBC, per openssl")
    func pinEncryptionParameters() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first, pin: SecretBytes(utf8: "2468"))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = ["asn1parse", "-in", store.privateKeyPath]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(output.contains("PBES2"))
        #expect(output.contains("PBKDF2"))
        #expect(output.contains("hmacWithSHA256"))
        #expect(output.contains("aes-256-cbc"))
        #expect(output.contains(":0927C0"))  // 600000 in hex
    }

    @Test("reset removes the key, its public half and listed metadata")
    func reset() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first)
        _ = FileManager.default.createFile(atPath: temporary.path + "/pin-attempts", contents: Data("1".utf8))
        try store.reset(alsoRemoving: ["pin-attempts"])
        #expect(!store.hasKey)
        #expect(!FileManager.default.fileExists(atPath: store.publicKeyPath))
        #expect(!FileManager.default.fileExists(atPath: temporary.path + "/pin-attempts"))
        #expect(code { _ = try store.loadPrivateKey() } == .keyNotFound)
        try store.store(TestKeys.second)
        #expect(try store.loadPrivateKey().publicKey == TestKeys.second.publicKey)
    }
}
