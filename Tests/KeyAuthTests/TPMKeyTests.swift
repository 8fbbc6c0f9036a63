import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// TPM-held keys against a real software TPM (swtpm): each test starts its own, with a fresh
/// state, so lockout counters and loaded objects never leak from one test into another.
@Suite("TPM keys", .timeLimit(.minutes(10)))
struct TPMKeyTests {
    private let message = Array("header.payload".utf8)
    private let pin = SecretBytes(utf8: "2468")

    /// Runs `body` with a fresh software TPM and an RSA-2048 key made on it, with `pin` or without
    /// a PIN; the TPM stops when `body` returns.
    private func withFreshKey(
        pin: SecretBytes?, _ body: (SoftwareTPM, TPMConnection, TPMKey) throws -> Void
    ) throws {
        let tpm = try SoftwareTPM()
        let connection = try tpm.connection
        let key = try TPMKey.generate(bits: 2048, pin: pin, on: connection)
        try withExtendedLifetime(tpm) { try body(tpm, connection, key) }
    }

    @Test("a key made with a PIN signs RS256 in the TPM, verifiable with its public key")
    func signsWithPIN() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            #expect(key.requiresPIN)
            #expect(key.isBoundToTPM)
            #expect(key.publicKey.bits == 2048)
            #expect(key.publicKey.exponent == [0x01, 0x00, 0x01])
            let signature = try key.signature(for: message, pin: pin, on: connection)
            #expect(signature.count == 256)
            #expect(key.publicKey.isValidSignature(signature, for: message))
            #expect(!key.publicKey.isValidSignature(signature, for: Array("header.payload2".utf8)))
            // PKCS#1 v1.5 is deterministic: the same message gives the same signature.
            #expect(try key.signature(for: message, pin: pin, on: connection) == signature)
        }
    }

    @Test("a key made without a PIN signs without one")
    func signsWithoutPIN() throws {
        try withFreshKey(pin: nil) { _, connection, key in
            #expect(!key.requiresPIN)
            #expect(key.isBoundToTPM)
            let signature = try key.signature(for: message, on: connection)
            #expect(key.publicKey.isValidSignature(signature, for: message))
        }
    }

    @Test("the blob is a TSS2 PRIVATE KEY holding no RSA private key material")
    func blobHoldsNoPrivateKey() throws {
        try withFreshKey(pin: pin) { _, _, key in
            let pem = String(decoding: key.pemRepresentation, as: UTF8.self)
            #expect(pem.hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----\n"))
            #expect(pem.components(separatedBy: "PRIVATE KEY-----").count == 3, "one BEGIN and one END, nothing else")

            let scratch = TemporaryDirectory()
            defer { scratch.remove() }
            let path = scratch.path + "/device-key.pem"
            try Data(key.pemRepresentation).write(to: URL(fileURLWithPath: path))
            let parsed = try ExternalCommand.run(["openssl", "asn1parse", "-in", path])
            #expect(parsed.status == 0)
            #expect(parsed.output.contains(":2.23.133.10.1.3"), "the TPM loadable-key OID")
            #expect(!parsed.output.contains("rsaEncryption"), "no PKCS#8 or SPKI RSA structure")
            // Stock OpenSSL, without the tpm2 provider, finds no private key it could use.
            let stock = try ExternalCommand.run(["openssl", "pkey", "-in", path, "-noout"])
            #expect(stock.status != 0)

            // Neither prime is anywhere in the blob; the same search finds both in a file key.
            #expect(
                try RSAPrimeSearch.factorsFound(in: RSAPrimeSearch.der(ofPEM: key.pemRepresentation), of: key.publicKey)
                    == 0)
            let fileKey = TestKeys.first
            #expect(
                try RSAPrimeSearch.factorsFound(
                    in: RSAPrimeSearch.der(ofPEM: fileKey.pkcs8PEM()), of: fileKey.publicKey) >= 2)
        }
    }

    @Test("the blob alone gives the public key, and the TPM's signature verifies with stock OpenSSL")
    func stockOpenSSLVerifies() throws {
        try withFreshKey(pin: nil) { _, connection, generated in
            let key = try TPMKey(pemRepresentation: generated.pemRepresentation)
            #expect(key.publicKey == generated.publicKey)
            let signature = try key.signature(for: message, on: connection)

            let scratch = TemporaryDirectory()
            defer { scratch.remove() }
            try Data(key.publicKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: scratch.path + "/key.pub"))
            try Data(message).write(to: URL(fileURLWithPath: scratch.path + "/message"))
            try Data(Array("tampered".utf8)).write(to: URL(fileURLWithPath: scratch.path + "/tampered"))
            try Data(signature).write(to: URL(fileURLWithPath: scratch.path + "/signature"))
            let verify = { (file: String) in
                try ExternalCommand.run([
                    "openssl", "dgst", "-sha256", "-verify", scratch.path + "/key.pub", "-signature",
                    scratch.path + "/signature", scratch.path + "/" + file,
                ])
            }
            let good = try verify("message")
            #expect(good.status == 0)
            #expect(good.output.contains("Verified OK"))
            #expect(try verify("tampered").status != 0)
        }
    }

    @Test("a key's public area leaves the scheme open, so the TPM signs SHA-512 for ssh; stock OpenSSL verifies it")
    func signsSHA512() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            // TPM_ALG_NULL: the scheme and hash come with each TPM2_Sign, not from the key.
            #expect(try TPMPublicArea(key.tpmPublicArea, structure: "the key").scheme == 0x0010)
            #expect(try connection.signsSHA512())
            let signature = try key.signature(for: message, digest: .sha512, pin: pin, on: connection)
            #expect(signature.count == 256)
            #expect(key.publicKey.isValidSSHSignature(signature, for: message, digest: .sha512))
            #expect(!key.publicKey.isValidSSHSignature(signature, for: message, digest: .sha256))
            #expect(signature != (try key.signature(for: message, pin: pin, on: connection)))

            let scratch = TemporaryDirectory()
            defer { scratch.remove() }
            try Data(key.publicKey.pemRepresentation.utf8).write(to: URL(fileURLWithPath: scratch.path + "/key.pub"))
            try Data(message).write(to: URL(fileURLWithPath: scratch.path + "/message"))
            try Data(signature).write(to: URL(fileURLWithPath: scratch.path + "/signature"))
            let verify = { (digest: String) in
                try ExternalCommand.run([
                    "openssl", "dgst", digest, "-verify", scratch.path + "/key.pub", "-signature",
                    scratch.path + "/signature", scratch.path + "/message",
                ])
            }
            let good = try verify("-sha512")
            #expect(good.status == 0)
            #expect(good.output.contains("Verified OK"))
            #expect(try verify("-sha256").status != 0)
        }
    }

    @Test("a JWT signed through the TPM verifies with PyJWT")
    func pyJWTVerifies() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            let fingerprint = key.publicKey.fingerprint
            let now = Int(Date().timeIntervalSince1970)
            let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(fingerprint)"}"#
            let payload =
                #"{"iss":"\#(fingerprint)","sub":"\#(fingerprint)","aud":"https://auth.example.test","iat":\#(now),"exp":\#(now + 600)}"#
            let signingInput = Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8))
            let signature = try key.signature(for: Array(signingInput.utf8), pin: pin, on: connection)
            let token = signingInput + "." + Base64URL.encode(signature)
            #expect(try CompactJWS(parsing: token).isSignatureValid(with: key.publicKey))

            let script = """
                import sys, jwt
                claims = jwt.decode(sys.argv[1], sys.argv[2], algorithms=["RS256"], audience="https://auth.example.test")
                print(claims["sub"], jwt.get_unverified_header(sys.argv[1])["kid"])
                """
            let result = try ExternalCommand.run([
                "/usr/bin/python3", "-c", script, token, key.publicKey.pemRepresentation,
            ])
            #expect(result.status == 0, "\(result.errorOutput)")
            #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "\(fingerprint) \(fingerprint)")
        }
    }

    @Test("a wrong PIN is refused by the TPM and counted by it; the right one still works")
    func wrongPINIsCounted() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            let before = try connection.info()
            #expect(before.lockoutCounter == 0)
            #expect(before.maximumTries == 3)

            let error = try #require(throws: KeyAuthError.self) {
                try key.signature(for: message, pin: SecretBytes(utf8: "1357"), on: connection)
            }
            #expect(error.code == .wrongPIN)
            #expect(error.message == "wrong PIN; the TPM locks out after 2 more wrong PINs")
            #expect((error.underlying as? NativeError)?.library == "tss2")
            let after = try connection.info()
            #expect(after.lockoutCounter == 1)
            #expect(after.attemptsLeft == 2)

            let signature = try key.signature(for: message, pin: pin, on: connection)
            #expect(key.publicKey.isValidSignature(signature, for: message))
        }
    }

    @Test("a PIN key asked to sign without its PIN is refused before the TPM counts anything")
    func missingPINIsNotCounted() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            let missing = try #require(throws: KeyAuthError.self) { try key.signature(for: message, on: connection) }
            #expect(missing.code == .wrongPIN)
            let tooLong = try #require(throws: KeyAuthError.self) {
                try key.signature(
                    for: message, pin: SecretBytes(utf8: String(repeating: "9", count: 33)), on: connection)
            }
            #expect(tooLong.code == .wrongPIN)
            #expect(try connection.info().lockoutCounter == 0)
        }
    }

    @Test("repeated wrong PINs put the TPM into lockout, and then even the right PIN is refused")
    func repeatedWrongPINsLockOut() throws {
        try withFreshKey(pin: pin) { _, connection, key in
            let wrong = SecretBytes(utf8: "0000")
            for left in [2, 1] {
                let error = try #require(throws: KeyAuthError.self) {
                    try key.signature(for: message, pin: wrong, on: connection)
                }
                #expect(error.code == .wrongPIN)
                #expect(error.message.contains("after \(left) more wrong PIN"))
            }
            let last = try #require(throws: KeyAuthError.self) {
                try key.signature(for: message, pin: wrong, on: connection)
            }
            #expect(last.code == .wrongPIN)
            #expect(last.message == "wrong PIN; the TPM is now locked and refuses its keys for up to 1000 seconds")
            #expect(last.retryAfter == 1000)

            let info = try connection.info()
            #expect(info.isLockedOut)
            #expect(info.lockoutCounter == 3)
            for attempt in [wrong, pin] {
                let error = try #require(throws: KeyAuthError.self) {
                    try key.signature(for: message, pin: attempt, on: connection)
                }
                #expect(error.code == .lockedOut)
                #expect(error.retryAfter == 1000)
                #expect(error.message.contains("for up to 1000 seconds"))
            }
            // Refusals during lockout are not counted again.
            #expect(try connection.info().lockoutCounter == 3)
        }
    }

    @Test("a blob taken to another TPM cannot sign there")
    func blobIsUselessOnAnotherTPM() throws {
        let first = try SoftwareTPM()
        let second = try SoftwareTPM()
        let key = try TPMKey.generate(bits: 2048, on: try first.connection)
        let copy = try TPMKey(pemRepresentation: key.pemRepresentation)
        let connection = try second.connection
        let error = try #require(throws: KeyAuthError.self) { try copy.signature(for: message, on: connection) }
        #expect(error.code == .keyCorrupt)
        #expect(error.message.contains("made by another TPM"))
        #expect(error.message.contains(second.tcti))
        // The first TPM still signs with it.
        #expect(key.publicKey.isValidSignature(try key.signature(for: message, on: first.connection), for: message))
    }

    @Test("a stopped TPM is reported as unavailable, naming the TCTI, and works again once back")
    func stoppedTPM() throws {
        try withFreshKey(pin: pin) { tpm, connection, key in
            tpm.stop()

            #expect(!connection.isAvailable())
            let signing = try #require(throws: KeyAuthError.self) {
                try key.signature(for: message, pin: pin, on: connection)
            }
            #expect(signing.code == .tpmUnavailable)
            #expect(signing.message.contains(tpm.tcti))
            let info = try #require(throws: KeyAuthError.self) { try connection.info() }
            #expect(info.code == .tpmUnavailable)
            #expect(info.message.contains(tpm.tcti))
            let generating = try #require(throws: KeyAuthError.self) { try TPMKey.generate(bits: 2048, on: connection) }
            #expect(generating.code == .tpmUnavailable)

            try tpm.start()
            #expect(connection.isAvailable())
            #expect(
                key.publicKey.isValidSignature(try key.signature(for: message, pin: pin, on: connection), for: message))
        }
    }

    @Test("a TCTI that points nowhere is unavailable, and the error names it")
    func nowhere() throws {
        for tcti in ["device:/nonexistent/tpmrm0", "nosuchtcti:anything"] {
            let connection = try TPMConnection(tcti: tcti)
            #expect(!connection.isAvailable())
            let error = try #require(throws: KeyAuthError.self) { try connection.info() }
            #expect(error.code == .tpmUnavailable)
            #expect(error.message.contains(tcti))
            let generating = try #require(throws: KeyAuthError.self) { try TPMKey.generate(bits: 2048, on: connection) }
            #expect(generating.code == .tpmUnavailable)
            #expect(generating.message.contains(tcti))
        }
    }

    @Test("the TPM reports its manufacturer, lockout parameters and key sizes")
    func info() throws {
        let tpm = try SoftwareTPM()
        let connection = try tpm.connection
        #expect(connection.isAvailable())
        let info = try connection.info()
        #expect(info.manufacturer == "IBM")
        #expect(info.vendor == "SW   TPM")
        #expect(info.maximumTries == 3)
        #expect(info.lockoutInterval == 1000)
        #expect(info.lockoutRecovery == 1000)
        #expect(!info.isLockedOut)
        #expect(info.attemptsLeft == 3)
        #expect(info.rsaKeySizes == [2048, 3072])
        #expect(info.preferredRSAKeySize == 3072)
    }

    @Test("without a size, a key is 3072 bits on a TPM that supports it; 4096 is refused by swtpm")
    func defaultSize() throws {
        let tpm = try SoftwareTPM()
        let connection = try tpm.connection
        let key = try TPMKey.generate(pin: pin, on: connection)
        #expect(key.publicKey.bits == 3072)
        let signature = try key.signature(for: message, pin: pin, on: connection)
        #expect(signature.count == 384)
        #expect(key.publicKey.isValidSignature(signature, for: message))
        let error = try #require(throws: KeyAuthError.self) { try TPMKey.generate(bits: 4096, on: connection) }
        #expect(error.code == .invalidArgument)
    }

    @Test("PINs outside 1 to 32 bytes and unknown sizes are refused before the TPM is asked")
    func generationLimits() throws {
        let connection = try TPMConnection(tcti: "device:/nonexistent/tpmrm0")
        for pin in ["", String(repeating: "7", count: 33)] {
            let error = try #require(throws: KeyAuthError.self) {
                try TPMKey.generate(bits: 2048, pin: SecretBytes(utf8: pin), on: connection)
            }
            #expect(error.code == .invalidArgument)
        }
        let size = try #require(throws: KeyAuthError.self) { try TPMKey.generate(bits: 1024, on: connection) }
        #expect(size.code == .invalidArgument)
    }
}
