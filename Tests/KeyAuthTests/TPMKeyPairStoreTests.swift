import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// ``KeyPairStore`` with keys in a real software TPM (swtpm): each test starts its own TPM, with a
/// fresh state, so lockout counters never leak from one test into another.
@Suite("KeyPairStore with a TPM", .timeLimit(.minutes(10)))
struct TPMKeyPairStoreTests {
    private let message = Array("header.payload".utf8)
    private let pin = SecretBytes(utf8: "2468")

    /// Runs `body` with a fresh software TPM and an empty key directory.
    private func withTPM(_ body: (SoftwareTPM, TPMConnection, TemporaryDirectory) throws -> Void) throws {
        let tpm = try SoftwareTPM()
        let directory = TemporaryDirectory("keyauth-tpm-store")
        defer { directory.remove() }
        try withExtendedLifetime(tpm) { try body(tpm, try tpm.connection, directory) }
    }

    @Test("a new key lives in the TPM: only the blob and the public key are stored, 0600")
    func createsTPMKey() throws {
        try withTPM { _, connection, directory in
            let store = KeyPairStore(directory: directory.path + "/key", keyStore: .tpm(connection))
            #expect(store.newKeyKind == .tpm)
            let created = try store.createKey(pin: pin)
            #expect(created.kind == .tpm)
            #expect(created.publicKey.bits == 3072, "the TPM's preferred size")
            #expect(store.storedKind == .tpm)
            #expect(store.hasKey)
            #expect(!FileManager.default.fileExists(atPath: store.privateKeyPath))
            #expect(fileMode(store.directory) == 0o700)
            #expect(fileMode(store.tpmKeyPath) == 0o600)
            #expect(fileMode(store.publicKeyPath) == 0o600)
            let blob = try Array(Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath)))
            #expect(String(decoding: blob, as: UTF8.self).hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----\n"))
            #expect(try RSAPrimeSearch.factorsFound(in: RSAPrimeSearch.der(ofPEM: blob), of: created.publicKey) == 0)
            #expect(try TPMKey(pemRepresentation: blob).requiresPIN)
            #expect(try store.loadPublicKey() == created.publicKey)

            // The key just made signs (through the TPM), and so does the key loaded back.
            #expect(created.publicKey.isValidSignature(try created.signature(for: message), for: message))
            let loaded = try store.loadKey(pin: pin)
            #expect(loaded.kind == .tpm)
            #expect(loaded.keyID == created.publicKey.fingerprint)
            #expect(created.publicKey.isValidSignature(try loaded.signature(for: message), for: message))
            let assertion = try JWTBuilder(key: loaded, audience: "https://auth.example.test").sign()
            #expect(try CompactJWS(parsing: assertion).isSignatureValid(with: created.publicKey))
        }
    }

    @Test("without a PIN the key has an empty authorization value")
    func createsKeyWithoutPIN() throws {
        try withTPM { _, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            let created = try store.createKey(bits: 2048)
            #expect(created.publicKey.bits == 2048)
            #expect(try !store.loadTPMKey().key.requiresPIN)
            #expect(created.publicKey.isValidSignature(try store.loadKey().signature(for: message), for: message))
        }
    }

    @Test("automatic makes TPM keys when the TPM answers, and key files when the TCTI points nowhere")
    func automatic() throws {
        try withTPM { _, connection, directory in
            let withTPM = KeyPairStore(directory: directory.path + "/a", keyStore: .automatic(connection))
            #expect(withTPM.newKeyKind == .tpm)
            #expect(try withTPM.createKey(bits: 2048).kind == .tpm)
            #expect(withTPM.storedKind == .tpm)

            let nowhere = try TPMConnection(tcti: SoftwareTPM.absentTCTI)
            let withoutTPM = KeyPairStore(directory: directory.path + "/b", keyStore: .automatic(nowhere))
            #expect(withoutTPM.newKeyKind == .file)
            let fileKey = try withoutTPM.createKey(bits: 2048, pin: SecretBytes(utf8: "135790"))
            #expect(fileKey.kind == .file)
            #expect(withoutTPM.storedKind == .file)
            #expect(try withoutTPM.isEncrypted())
            #expect(!FileManager.default.fileExists(atPath: withoutTPM.tpmKeyPath))
        }
    }

    @Test("a TPM whose owner hierarchy has a password gets no keys: automatic makes files, tpm refuses")
    func ownerPassword() throws {
        try withTPM { tpm, connection, directory in
            try tpm.setOwnerPassword("owner-secret")
            #expect(try connection.info().hasOwnerPassword)
            let automatic = KeyPairStore(directory: directory.path + "/a", keyStore: .automatic(connection))
            #expect(automatic.newKeyKind == .file)
            let forced = KeyPairStore(directory: directory.path + "/b", keyStore: .tpm(connection))
            let error = try #require(throws: KeyAuthError.self) { try forced.createKey(bits: 2048) }
            #expect(error.code == .tpmUnavailable)
            #expect(error.message.contains("owner password"))
            #expect(!forced.hasKey)
        }
    }

    @Test("sizes the TPM cannot make and PINs too long for it are refused, and nothing is stored")
    func refusesWhatTheTPMCannotDo() throws {
        try withTPM { _, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            let size = try #require(throws: KeyAuthError.self) { try store.createKey(bits: 4096) }
            #expect(size.code == .invalidArgument)
            #expect(size.message.contains("2048 or 3072"))
            let long = try #require(throws: KeyAuthError.self) {
                try store.createKey(bits: 2048, pin: SecretBytes(utf8: String(repeating: "8", count: 33)))
            }
            #expect(long.code == .invalidArgument)
            #expect(!store.hasKey)
        }
    }

    @Test("a wrong PIN is not noticed when the key is opened, but refused and counted by the TPM when it signs")
    func wrongPINAtSigning() throws {
        try withTPM { _, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            try store.createKey(bits: 2048, pin: pin)
            let opened = try store.loadKey(pin: SecretBytes(utf8: "1357"))
            let error = try #require(throws: KeyAuthError.self) { try opened.signature(for: message) }
            #expect(error.code == .wrongPIN)
            #expect(error.message == "wrong PIN; the TPM locks out after 2 more wrong PINs")
            #expect(try connection.info().lockoutCounter == 1)
            #expect(!FileManager.default.fileExists(atPath: store.pinAttemptsPath))
        }
    }

    @Test("a TPM key is opened on the store's TPM, and a key file loader refuses it")
    func loadingNeedsNoHint() throws {
        try withTPM { _, connection, directory in
            try KeyPairStore(directory: directory.path, keyStore: .tpm(connection)).createKey(bits: 2048)
            // A store opened later with another choice still finds the TPM key by its file.
            let reopened = KeyPairStore(directory: directory.path, keyStore: .automatic(connection))
            #expect(reopened.storedKind == .tpm)
            #expect(try reopened.loadTPMKey().connection == connection)
            let fileOnly = KeyPairStore(directory: directory.path)
            #expect(try fileOnly.loadTPMKey().connection == TPMConnection.kernelResourceManager)
            let error = try #require(throws: KeyAuthError.self) { try fileOnly.loadPrivateKey() }
            #expect(error.code == .invalidArgument)
            #expect(throws: KeyAuthError.self) { try reopened.createKey(bits: 2048) }
        }
    }

    @Test("a blob that is corrupt, exposed or not the stored public key's is refused before the TPM is asked")
    func refusesBadBlobs() throws {
        try withTPM { tpm, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            try store.createKey(bits: 2048)
            let blob = try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath))
            tpm.stop()

            chmod(store.tpmKeyPath, 0o644)
            let exposed = try #require(throws: KeyAuthError.self) { try store.loadKey() }
            #expect(exposed.code == .keyUnprotected)
            chmod(store.tpmKeyPath, 0o600)

            try Data("-----BEGIN TSS2 PRIVATE KEY-----\nAAAA\n-----END TSS2 PRIVATE KEY-----\n".utf8).write(
                to: URL(fileURLWithPath: store.tpmKeyPath))
            let corrupt = try #require(throws: KeyAuthError.self) { try store.loadKey() }
            #expect(corrupt.code == .keyCorrupt)

            try blob.write(to: URL(fileURLWithPath: store.tpmKeyPath))
            try Data(TestKeys.first.publicKey.pemRepresentation.utf8).write(
                to: URL(fileURLWithPath: store.publicKeyPath))
            let mismatch = try #require(throws: KeyAuthError.self) { try store.loadKey() }
            #expect(mismatch.code == .keyCorrupt)
            #expect(mismatch.message.contains("does not match"))
        }
    }

    @Test("replacePIN gives a TPM key a new PIN: it signs with the new one, the key ID stays, the old one is refused")
    func replacePIN() throws {
        try withTPM { tpm, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            let created = try store.createKey(bits: 2048, pin: pin)
            let oldBlob = try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath))
            let publicFile = try Data(contentsOf: URL(fileURLWithPath: store.publicKeyPath))
            let oldFile = try fileNumber(store.tpmKeyPath)
            let entries = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
            let newPIN = SecretBytes(utf8: "97531")

            // Through loadKey's DeviceKey, as an app holding either kind would call it.
            try store.replacePIN(of: try store.loadKey(pin: pin), with: newPIN)
            #expect(try connection.info().lockoutCounter == 0, "a right PIN costs nothing of the TPM's lockout")
            let newBlob = try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath))
            #expect(newBlob != oldBlob)
            #expect(fileMode(store.tpmKeyPath) == 0o600)
            #expect(try fileNumber(store.tpmKeyPath) != oldFile, "replaced by a rename, not rewritten in place")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == entries)
            #expect(try Data(contentsOf: URL(fileURLWithPath: store.publicKeyPath)) == publicFile)
            #expect(try TPMKey(pemRepresentation: Array(newBlob)).publicKey == created.publicKey)

            let reopened = try store.loadKey(pin: newPIN)
            #expect(reopened.keyID == created.keyID)
            #expect(created.publicKey.isValidSignature(try reopened.signature(for: message), for: message))
            let old = try #require(throws: KeyAuthError.self) { try store.loadKey(pin: pin).signature(for: message) }
            #expect(old.code == .wrongPIN)
            #expect(try connection.info().lockoutCounter == 1)

            // Only the private part differs: the type, emptyAuth, parent and public part keep their bytes.
            let oldFields = try asn1Fields(oldBlob, in: directory)
            let newFields = try asn1Fields(newBlob, in: directory)
            #expect(oldFields.count == 7 && newFields.count == 7)
            // The SEQUENCE's length follows the private part's, which holds the PIN.
            #expect(oldFields.dropFirst().dropLast() == newFields.dropFirst().dropLast())
            #expect(oldFields.last != newFields.last)

            // Stock OpenSSL's tpm2 provider opens the new blob with the new PIN, and not with the old.
            let digest = directory.path + "/digest"
            try Data(CryptoPrimitives.sha256(message)).write(to: URL(fileURLWithPath: digest))
            let signed = try providerSignature(store.tpmKeyPath, pin: "97531", digest: digest, on: tpm)
            #expect(signed.status == 0, "\(signed.errorOutput)")
            let signature = try Array(Data(contentsOf: URL(fileURLWithPath: digest + ".sig")))
            #expect(created.publicKey.isValidSignature(signature, for: message))
            let refused = try providerSignature(store.tpmKeyPath, pin: "2468", digest: digest, on: tpm)
            #expect(refused.status != 0)
            #expect(refused.errorOutput.contains("authorization HMAC check failed"))
        }
    }

    @Test("a wrong current PIN, a blob changed meanwhile or a stopped TPM leave the stored blob as it was")
    func replacePINFailures() throws {
        try withTPM { tpm, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            try store.createKey(bits: 2048, pin: pin)
            let blob = { try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath)) }
            let before = try blob()
            let newPIN = SecretBytes(utf8: "97531")

            let wrong = try #require(throws: KeyAuthError.self) {
                try store.replacePIN(of: try store.loadTPMKey(pin: SecretBytes(utf8: "1357")), with: newPIN)
            }
            #expect(wrong.code == .wrongPIN)
            #expect(wrong.message == "wrong PIN; the TPM locks out after 2 more wrong PINs")
            #expect(try connection.info().lockoutCounter == 1, "counted once, as a login's wrong PIN is")
            #expect(try blob() == before)
            #expect(!FileManager.default.fileExists(atPath: store.pinAttemptsPath))

            // Another change wins meanwhile: the stale key's change is not written over it.
            let stale = try store.loadTPMKey(pin: pin)
            try store.replacePIN(of: try store.loadTPMKey(pin: pin), with: SecretBytes(utf8: "8642"))
            let changed = try blob()
            let raced = try #require(throws: KeyAuthError.self) { try store.replacePIN(of: stale, with: newPIN) }
            #expect(raced.code == .keyCorrupt)
            #expect(raced.message.contains("changed while its PIN was being changed"))
            #expect(try blob() == changed)

            tpm.stop()
            let gone = try #require(throws: KeyAuthError.self) {
                try store.replacePIN(of: try store.loadTPMKey(pin: SecretBytes(utf8: "8642")), with: newPIN)
            }
            #expect(gone.code == .tpmUnavailable)
            #expect(gone.message.contains(tpm.tcti))
            #expect(try blob() == changed)
        }
    }

    @Test("replacePIN refuses a key without a PIN, a new PIN too long for the TPM, and the wrong kind of store")
    func replacePINRefusals() throws {
        try withTPM { _, connection, directory in
            let store = KeyPairStore(directory: directory.path + "/a", keyStore: .tpm(connection))
            try store.createKey(bits: 2048, pin: pin)
            let before = try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath))
            let long = try #require(throws: KeyAuthError.self) {
                try store.replacePIN(
                    of: try store.loadTPMKey(pin: pin), with: SecretBytes(utf8: String(repeating: "8", count: 33)))
            }
            #expect(long.code == .invalidArgument)
            let keyFile = try #require(throws: KeyAuthError.self) {
                try store.replacePIN(of: TestKeys.first, with: pin)
            }
            #expect(keyFile.code == .invalidArgument)
            #expect(try Data(contentsOf: URL(fileURLWithPath: store.tpmKeyPath)) == before)
            #expect(try connection.info().lockoutCounter == 0)

            let withoutPIN = KeyPairStore(directory: directory.path + "/b", keyStore: .tpm(connection))
            try withoutPIN.createKey(bits: 2048)
            let none = try #require(throws: KeyAuthError.self) {
                try withoutPIN.replacePIN(of: try withoutPIN.loadTPMKey(), with: pin)
            }
            #expect(none.code == .invalidArgument)
            #expect(none.message.contains("without a PIN"))

            let files = KeyPairStore(directory: directory.path + "/c")
            try files.store(TestKeys.first, pin: SecretBytes(utf8: "135790"))
            let tpmKey = try #require(throws: KeyAuthError.self) {
                try files.replacePIN(of: try store.loadTPMKey(pin: pin), with: pin)
            }
            #expect(tpmKey.code == .invalidArgument)
        }
    }

    @Test("reset deletes the blob and the public key, and needs no TPM")
    func reset() throws {
        try withTPM { tpm, connection, directory in
            let store = KeyPairStore(directory: directory.path, keyStore: .tpm(connection))
            try store.createKey(bits: 2048, pin: pin)
            tpm.stop()
            try store.reset()
            #expect(!store.hasKey)
            #expect(store.storedKind == nil)
            for path in [store.tpmKeyPath, store.publicKeyPath, store.privateKeyPath] {
                #expect(!FileManager.default.fileExists(atPath: path), "\(path)")
            }
        }
    }
}

/// The file's inode number: a file replaced by `rename` gets the new file's.
private func fileNumber(_ path: String) throws -> Int {
    try #require(try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? Int)
}

/// The fields `openssl asn1parse` shows for a PEM, without their offsets.
private func asn1Fields(_ pem: Data, in directory: TemporaryDirectory) throws -> [String] {
    let path = directory.path + "/asn1.pem"
    try pem.write(to: URL(fileURLWithPath: path))
    let parsed = try ExternalCommand.run(["openssl", "asn1parse", "-in", path])
    try #require(parsed.status == 0, "\(parsed.errorOutput)")
    return parsed.output.split(separator: "\n").map { line in
        String(line.drop { $0 != ":" }).trimmingCharacters(in: .whitespaces)
    }
}

/// Has stock OpenSSL, through the tpm2 provider on `tpm`, sign the SHA-256 digest in `digest`
/// with the blob at `blob` and `pin` (RS256's PKCS#1 v1.5), into `digest`.sig.
private func providerSignature(_ blob: String, pin: String, digest: String, on tpm: SoftwareTPM) throws
    -> ExternalCommand
{
    try ExternalCommand.run(
        [
            "openssl", "pkeyutl", "-sign", "-provider", "tpm2", "-provider", "default", "-propquery", "?provider=tpm2",
            "-inkey", blob, "-passin", "pass:" + pin, "-pkeyopt", "digest:sha256", "-in", digest, "-out",
            digest + ".sig",
        ],
        environment: ["PATH": "/usr/bin:/bin", "TPM2OPENSSL_TCTI": tpm.tcti])
}
