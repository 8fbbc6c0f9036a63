import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@Suite("KeyPairStore", .timeLimit(.minutes(10)))
struct KeyPairStoreTests {
    private func code(_ body: () throws -> Void) -> KeyAuthError.Code? {
        caught(body)?.code
    }

    /// Temporary files an atomic write left behind in `directory`; there should be none.
    private func leftoverTemporaryFiles(in directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix(".tmp") }
    }

    /// Runs `openssl` and returns its status and standard output.
    private func openssl(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let run = try ExternalCommand.run(["openssl"] + arguments)
        return (run.status, run.output)
    }

    /// Stores `key` as keyauth did before scrypt: PBKDF2-HMAC-SHA256, 600,000 rounds.
    private func writeLegacyKey(_ key: RSAPrivateKey, pin: SecretBytes, to store: KeyPairStore) throws {
        try store.store(key)
        let legacy = try key.pkcs8PEM(pin: pin, encryption: .legacyPBKDF2)
        try Data(legacy).write(to: URL(fileURLWithPath: store.privateKeyPath))
        chmod(store.privateKeyPath, 0o600)
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
        #expect(fileMode(store.directory) == 0o700)
        #expect(fileMode(store.privateKeyPath) == 0o600)
        #expect(fileMode(store.publicKeyPath) == 0o600)
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
        #expect(fileMode(temporary.path) == 0o700)
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
        #expect(try leftoverTemporaryFiles(in: temporary.path).isEmpty)
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
        try store.store(TestKeys.first, pin: SecretBytes(utf8: "246802"))
        #expect(try store.isEncrypted())
        let pem = try String(contentsOfFile: store.privateKeyPath, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
        #expect(try store.loadPrivateKey(pin: SecretBytes(utf8: "246802")).publicKey == TestKeys.first.publicKey)
        #expect(code { _ = try store.loadPrivateKey(pin: SecretBytes(utf8: "135790")) } == .wrongPIN)
        // Without a PIN the key is not wrongly unlocked: it says it is encrypted.
        #expect(code { _ = try store.loadPrivateKey() } == .keyEncrypted)
        // Without the PIN, the public key is still there for `pubkey` and `status`.
        #expect(try store.loadPublicKey() == TestKeys.first.publicKey)
    }

    @Test("the encrypted key uses scrypt N=16384 r=8 p=16 and AES-256-CBC, per openssl asn1parse")
    func pinEncryptionParameters() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first, pin: SecretBytes(utf8: "246802"))
        let output = try openssl(["asn1parse", "-in", store.privateKeyPath]).output
        #expect(output.contains(":PBES2"))
        #expect(output.contains(":scrypt"))
        #expect(!output.contains("PBKDF2"))
        #expect(output.contains("INTEGER           :4000"))  // N = 16384
        #expect(output.contains("INTEGER           :08"))  // r = 8
        #expect(output.contains("INTEGER           :10"))  // p = 16
        #expect(output.contains(":aes-256-cbc"))
        let pem = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath)))
        #expect(RSAPrivateKey.pinEncryption(ofPEM: pem) == .standard)
        #expect(PINKeyEncryption.standard == PINKeyEncryption(.scrypt(n: 16384, r: 8, p: 16)))
    }

    @Test("openssl pkey reads the scrypt key file with the PIN and finds the same key")
    func opensslReadsScryptFile() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        try store.store(TestKeys.first, pin: SecretBytes(utf8: "246802"))
        let right = try openssl(["pkey", "-in", store.privateKeyPath, "-passin", "pass:246802", "-pubout"])
        #expect(right.status == 0)
        #expect(right.output == TestKeys.first.publicKey.pemRepresentation)
        let wrong = try openssl(["pkey", "-in", store.privateKeyPath, "-passin", "pass:135790", "-pubout"])
        #expect(wrong.status != 0)
    }

    @Test("a PBKDF2 key file opens with its PIN and is then rewritten with scrypt, which the same PIN opens")
    func pbkdf2FileIsReencrypted() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        let pin = SecretBytes(utf8: "246802")
        try writeLegacyKey(TestKeys.first, pin: pin, to: store)
        #expect(try openssl(["asn1parse", "-in", store.privateKeyPath]).output.contains(":PBKDF2"))

        let wrong = try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath))
        #expect(code { _ = try store.loadPrivateKey(pin: SecretBytes(utf8: "135790")) } == .wrongPIN)
        // A wrong PIN changes nothing.
        #expect(try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath)) == wrong)

        #expect(try store.loadPrivateKey(pin: pin).publicKey == TestKeys.first.publicKey)
        let output = try openssl(["asn1parse", "-in", store.privateKeyPath]).output
        #expect(output.contains(":scrypt"))
        #expect(!output.contains("PBKDF2"))
        #expect(fileMode(store.privateKeyPath) == 0o600)
        #expect(try store.loadPrivateKey(pin: pin).publicKey == TestKeys.first.publicKey)
        #expect(code { _ = try store.loadPrivateKey(pin: SecretBytes(utf8: "135790")) } == .wrongPIN)
        #expect(try leftoverTemporaryFiles(in: temporary.path).isEmpty)
    }

    @Test("a key file already in the standard encryption is left as it is after a login")
    func standardFileIsNotRewritten() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path)
        let pin = SecretBytes(utf8: "246802")
        try store.store(TestKeys.first, pin: pin)
        let before = try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath))
        _ = try store.loadPrivateKey(pin: pin)
        #expect(try Data(contentsOf: URL(fileURLWithPath: store.privateKeyPath)) == before)
    }

    @Test("the encryption of a key file is read without the PIN")
    func encryptionIsDescribed() throws {
        let pin = SecretBytes(utf8: "246802")
        let cheap = PINKeyEncryption(.scrypt(n: 1024, r: 8, p: 2))
        #expect(RSAPrivateKey.pinEncryption(ofPEM: try TestKeys.first.pkcs8PEM(pin: pin, encryption: cheap)) == cheap)
        let legacy = try TestKeys.first.pkcs8PEM(pin: pin, encryption: .legacyPBKDF2)
        #expect(RSAPrivateKey.pinEncryption(ofPEM: legacy) == .legacyPBKDF2)
        #expect(RSAPrivateKey.pinEncryption(ofPEM: try TestKeys.first.pkcs8PEM()) == nil)
        #expect(RSAPrivateKey.pinEncryption(ofPEM: Array("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n".utf8)) == nil)
        #expect(PINKeyEncryption.legacyPBKDF2.description == "PBKDF2-HMAC-SHA256 600000 rounds")
        #expect(PINKeyEncryption.standard.description == "scrypt N=16384 r=8 p=16")
    }

    @Test("a key file naming a costlier encryption than keyauth reads is refused as damaged before any PIN is tried")
    func costlyEncryptionRefused() throws {
        let pin = SecretBytes(utf8: "246802")
        // 24 MiB of scrypt memory: OpenSSL writes it, keyauth reads at most the standard's 16.
        let wide = PINKeyEncryption(.scrypt(n: 1 << 14, r: 12, p: 1))
        let pem = try TestKeys.first.pkcs8PEM(pin: pin, encryption: wide)
        do {
            _ = try RSAPrivateKey(pemRepresentation: pem, pin: pin)
            Issue.record("a key file with scrypt N=16384 r=12 was read")
        } catch {
            #expect(error.code == .keyCorrupt)
            #expect(error.message.contains("scrypt N=16384 r=12 p=1"))
        }
        let cheap = PINKeyEncryption(.scrypt(n: 1024, r: 8, p: 1))
        let readable = try TestKeys.first.pkcs8PEM(pin: pin, encryption: cheap)
        #expect(try RSAPrivateKey(pemRepresentation: readable, pin: pin).publicKey == TestKeys.first.publicKey)
        // The bounds: twice the standard's time, its memory, 10 million PBKDF2 rounds.
        #expect(PINKeyEncryption.standard.isAffordable && PINKeyEncryption.legacyPBKDF2.isAffordable)
        #expect(PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: 32)).isAffordable)
        #expect(!PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: 33)).isAffordable)
        #expect(!PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: 16382)).isAffordable)
        #expect(!PINKeyEncryption(.scrypt(n: 1 << 15, r: 8, p: 1)).isAffordable)
        #expect(!PINKeyEncryption(.scrypt(n: 1 << 62, r: 1 << 10, p: 1 << 10)).isAffordable)
        #expect(!PINKeyEncryption(.scrypt(n: 1 << 14, r: 8, p: 0)).isAffordable)
        // Within the time, but p's blocks need 256 MiB, beyond OpenSSL's 32.
        #expect(!PINKeyEncryption(.scrypt(n: 2, r: 1, p: 2_000_000)).isAffordable)
        #expect(PINKeyEncryption(.pbkdf2HMACSHA256(iterations: 10_000_000)).isAffordable)
        #expect(!PINKeyEncryption(.pbkdf2HMACSHA256(iterations: 10_000_001)).isAffordable)
    }

    @Test("a key file whose scrypt N OpenSSL cannot use is damaged, never a wrong PIN")
    func unusableParametersAreDamage() throws {
        let pin = SecretBytes(utf8: "246802")
        let cheap = PINKeyEncryption(.scrypt(n: 1024, r: 8, p: 2))
        let pemText = String(decoding: try TestKeys.first.pkcs8PEM(pin: pin, encryption: cheap), as: UTF8.self)
        let body = pemText.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let der = try #require(Data(base64Encoded: body).map { Array($0) })
        // N = 1024, r = 8, p = 2 as DER INTEGERs.
        let parameters: [UInt8] = [0x02, 0x02, 0x04, 0x00, 0x02, 0x01, 0x08, 0x02, 0x01, 0x02]
        func patched(_ replacement: [UInt8]) throws -> [UInt8] {
            let start = try #require(
                (0...(der.count - parameters.count)).first { Array(der[$0..<($0 + parameters.count)]) == parameters })
            var bytes = der
            bytes.replaceSubrange(start..<(start + replacement.count), with: replacement)
            let encoded = Data(bytes).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
            return Array(
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\n\(encoded)\n-----END ENCRYPTED PRIVATE KEY-----\n".utf8)
        }
        // One bit off in N: 1023 is no power of two.
        let oddN = try patched([0x02, 0x02, 0x03, 0xFF])
        #expect(RSAPrivateKey.pinEncryption(ofPEM: oddN) == PINKeyEncryption(.scrypt(n: 1023, r: 8, p: 2)))
        do {
            _ = try RSAPrivateKey(pemRepresentation: oddN, pin: pin)
            Issue.record("a key file with scrypt N=1023 was read")
        } catch {
            #expect(error.code == .keyCorrupt, "\(error.message)")
        }
        // The file as written opens.
        #expect(
            try RSAPrivateKey(pemRepresentation: try patched(parameters), pin: pin).publicKey
                == TestKeys.first.publicKey)
    }

    @Test("a key file encrypted in a scheme keyauth does not write is refused as damaged, whatever it costs")
    func foreignEncryptionRefused() throws {
        let scratch = TemporaryDirectory("keyauth-foreign-pkcs8")
        defer { scratch.remove() }
        let plain = scratch.path + "/plain.pem"
        try Data(try TestKeys.first.pkcs8PEM()).write(to: URL(fileURLWithPath: plain))
        // AES-128: a scheme keyauth never writes, refused before its cost is read (a file like it
        // could name two billion PBKDF2 rounds, which OpenSSL would pay for every PIN tried).
        let made = try ExternalCommand.run(
            [
                "openssl", "pkcs8", "-topk8", "-in", plain, "-out", scratch.path + "/foreign.pem", "-v2", "aes-128-cbc",
                "-iter", "2048", "-passout", "pass:246802",
            ], timeout: 60)
        try #require(made.status == 0, "\(made.errorOutput)")
        let foreign = try Data(contentsOf: URL(fileURLWithPath: scratch.path + "/foreign.pem"))
        let error = #expect(throws: KeyAuthError.self) {
            try RSAPrivateKey(pemRepresentation: Array(foreign), pin: SecretBytes(utf8: "246802"))
        }
        #expect(error?.code == .keyCorrupt)
        #expect(error?.message.contains("not encrypted in a way keyauth reads") == true)
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

    @Test("an app's default store is under XDG_DATA_HOME, else HOME, and its name stays one directory")
    func defaultStore() throws {
        let xdg = try KeyPairStore.default(appName: "myapp", environment: ["XDG_DATA_HOME": "/x/data", "HOME": "/h"])
        #expect(xdg.directory == "/x/data/myapp/key")
        let home = try KeyPairStore.default(appName: "my.app-2", environment: ["XDG_DATA_HOME": "rel", "HOME": "/h"])
        #expect(home.directory == "/h/.local/share/my.app-2/key")
        for name in ["", "..", ".hidden", "a/b", "a b"] {
            let error = #expect(throws: KeyAuthError.self) {
                try KeyPairStore.default(appName: name, environment: ["HOME": "/h"])
            }
            #expect(error?.code == .invalidArgument, "\(name)")
        }
        let error = #expect(throws: KeyAuthError.self) { try KeyPairStore.default(appName: "myapp", environment: [:]) }
        #expect(error?.code == .storageFailed)
    }
}
