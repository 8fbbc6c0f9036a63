import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuth

/// The parts of the TPM support that need no TPM: response codes, key blob parsing, settings.
@Suite("TPM response codes, blobs and settings", .timeLimit(.minutes(10)))
struct TPMResponseCodeTests {
    @Test(
        "TPM stack response codes map to what keyauth does about them",
        arguments: [
            // Format 1 codes carry the session, handle or parameter number at fault.
            (0x0000_098E, TPMResponseCode.Meaning.authorizationFailed),  // AUTH_FAIL, session 1
            (0x0000_0A8E, .authorizationFailed),  // AUTH_FAIL, session 2
            (0x0000_09A2, .authorizationFailed),  // BAD_AUTH, session 1
            (0x0000_0921, .lockedOut),  // LOCKOUT
            (0x0000_01DF, .foreignKey),  // INTEGRITY, parameter 1
            (0x0000_01E5, .foreignKey),  // BINDING, parameter 1
            (0x0000_02C7, .unsupported),  // KEY_SIZE, parameter 2
            (0x0000_0100, .unreachable),  // INITIALIZE
            (0x0000_0101, .unreachable),  // FAILURE
            (0x000A_000A, .unreachable),  // TCTI IO_ERROR
            (0x000A_0015, .unreachable),  // TCTI NOT_SUPPORTED (no such TCTI)
            (0x0007_000A, .unreachable),  // ESAPI IO_ERROR
            (0x0007_0005, .other),  // ESAPI BAD_REFERENCE
            (0x000C_098E, .authorizationFailed),  // through a resource manager
            (0x0000_0922, .other),  // RETRY
        ])
    func meanings(code: Int, meaning: TPMResponseCode.Meaning) {
        #expect(TPMResponseCode(UInt32(code)).meaning == meaning)
    }

    @Test("the provider's error data is read as a response code and its text")
    func errorData() throws {
        let parsed = try #require(TPMFailure.parse("2446 tpm:session(1):the authorization HMAC check failed"))
        #expect(parsed.code == TPMResponseCode(0x98E))
        #expect(parsed.text == "tpm:session(1):the authorization HMAC check failed")
        #expect(TPMFailure.parse("name=tpm2") == nil)
        #expect(TPMFailure.parse("0 success") == nil)
        #expect(TPMFailure.parse("") == nil)
    }

    @Test("each failure becomes the documented error code, naming the TCTI where it matters")
    func errors() throws {
        let connection = try TPMConnection(tcti: "swtpm:host=127.0.0.1,port=1")
        let cases: [(UInt32, KeyAuthError.Code)] = [
            (0x98E, .wrongPIN), (0x921, .lockedOut), (0xA000A, .tpmUnavailable), (0x1DF, .keyCorrupt),
            (0x2C7, .invalidArgument), (0x70005, .cryptoFailed),
        ]
        for (code, expected) in cases {
            let error = TPMFailure(responseCode: TPMResponseCode(code), text: "text").error(
                doing: "sign", on: connection)
            #expect(error.code == expected)
            #expect((error.underlying as? NativeError)?.code == Int(code))
            if expected == .tpmUnavailable || expected == .keyCorrupt {
                #expect(error.message.contains("swtpm:host=127.0.0.1,port=1"))
            }
        }
    }

    @Test("KEYAUTH_TPM_TCTI selects the TPM; unset or empty means the kernel resource manager")
    func environment() throws {
        #expect(try TPMConnection.fromEnvironment([:]).tcti == "device:/dev/tpmrm0")
        #expect(try TPMConnection.fromEnvironment(["KEYAUTH_TPM_TCTI": ""]).tcti == "device:/dev/tpmrm0")
        #expect(
            try TPMConnection.fromEnvironment(["KEYAUTH_TPM_TCTI": "swtpm:host=127.0.0.1,port=2321"]).tcti
                == "swtpm:host=127.0.0.1,port=2321")
        // The provider's own variable is not a way in: keyauth hands the provider its choice.
        #expect(try TPMConnection.fromEnvironment(["TPM2OPENSSL_TCTI": "mssim:"]).tcti == "device:/dev/tpmrm0")
        let error = try #require(throws: KeyAuthError.self) {
            try TPMConnection.fromEnvironment(["KEYAUTH_TPM_TCTI": "swtpm:\nport=1"])
        }
        #expect(error.code == .invalidArgument)
    }

    @Test("anything but an RSA TSS2 PRIVATE KEY is refused as corrupt, without a TPM")
    func notABlob() throws {
        let valid = Self.swtpmBlob
        let key = try TPMKey(pemRepresentation: Array(valid.utf8))
        #expect(key.requiresPIN)
        #expect(key.isBoundToTPM)
        #expect(key.publicKey.bits == 2048)

        let lines = valid.split(separator: "\n")
        let truncated = (lines.prefix(5) + lines.suffix(1)).joined(separator: "\n")
        let relabelled = valid.replacingOccurrences(of: "TSS2 PRIVATE KEY", with: "PRIVATE KEY")
        for pem in [try TestKeys.first.pkcs8PEM(), Array(truncated.utf8), Array(relabelled.utf8), [], Array("x".utf8)] {
            let error = try #require(throws: KeyAuthError.self) { try TPMKey(pemRepresentation: pem) }
            #expect(error.code == .keyCorrupt)
        }
    }

    @Test("DER lengths that run past the data are refused")
    func derReader() {
        var short = DERReader([0x30, 0x05, 0x01, 0x02])
        #expect(short.read(tag: 0x30) == nil)
        var long = DERReader([0x04, 0x82, 0x00, 0x02, 0xAA, 0xBB])
        #expect(long.read(tag: 0x04) == DERReader([0xAA, 0xBB]))
        #expect(long.isAtEnd)
        var huge = DERReader([0x04, 0x84, 0xFF, 0xFF, 0xFF, 0xFF])
        #expect(huge.read(tag: 0x04) == nil)
        var wrongTag = DERReader([0x02, 0x01, 0x00])
        #expect(wrongTag.read(tag: 0x04) == nil)
    }

    /// An RSA-2048 key with a PIN, made by swtpm 0.7.1 through tpm2-openssl 1.1.1.
    static let swtpmBlob = """
        -----BEGIN TSS2 PRIVATE KEY-----
        MIICEgYGZ4EFCgEDoAMBAQACBEAAAAEEggEYARYAAQALAAYAcgAAABAAEAgAAAAA
        AAEA7PUgXcKq3CJ+uStjTpSHw33Es8V3worOmfRWdD1N0ysb67G6Qww0fpkK7QHF
        GLvQD5sLqgc5Sxu7Vla8DY0kJcXAqzg6v4ntZ1V8fCTw5WPs5JyIP5i/RkCHwp6u
        3fIn8zUoxvBpsGEA8TVMTPZrHdLa9etpmRrbTgdkMk1ac6K/NZT18ouZ+o+dCqJf
        vYsT9BHaISgwBQmfX1DxWyBJYZCGrGVmd6/42Wk5tb4164z0ukZjLEfw2yBHxaL3
        aE7rQ9i+LPClwQ46QPr8prTBmSssJCsHaIMfKKIChxc43OqVihKfiMBd+XcEpaFG
        E2rx6yd/gZgZzX0oVq1OdxpClQSB4ADeACAlqo8zsefAxgQRKouEgnGFtH3DSPsc
        Lw7/wqdgaSOspgAQUCAnHkTPDxo/ySycDateB27WFzvzSUVz78Dl4W80mRtbOBjK
        V+k/ruosS2G1MYnDTTwc43Xh4QPDpvpHWTpWczz52b5q9j6BU4FW9EZVEeQ8x70L
        wsLuZRkfFjVlYTo2kTFsxFbl/5m5sVyEsWr4BI075cFc0ixTl5bm4ODz9zGXnVe5
        frYQpmMF0CMGdGNuTbt78J+Mzd20LFYt3lzr7L4B96/NruYtA3NRq+lsFrKug/ag
        qXtMPOZ5
        -----END TSS2 PRIVATE KEY-----

        """
}
