import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

/// The agent's `sign` request answered in-process: it signs what a login or a DPoP proof through
/// it sends, and nothing that states a presence check it never made, nor bytes of another kind.
@Suite("keyauth agent sign request", .timeLimit(.minutes(5)))
struct AgentSigningPolicyTests {
    /// The signing input of a JWS with `header` and `payload`.
    static func input(_ header: JSONValue, _ payload: JSONValue) -> [UInt8] {
        Array(
            (Base64URL.encode(Array(header.serialized().utf8)) + "."
                + Base64URL.encode(Array(payload.serialized().utf8))).utf8)
    }

    static func sign(_ input: [UInt8]) -> KeyAgentRequest {
        KeyAgentRequest(op: "sign", input: Base64URL.encode(input))
    }

    @Test(
        "a login assertion and a DPoP proof are signed; a statement of presence, other algorithms and other bytes are not"
    )
    func signsWhatLoginsSend() throws {
        try AgentUnlockTests.withServer { store, server in
            #expect(AgentUnlockTests.unlock(server, AgentUnlockTests.pin).ok)
            let publicKey = try store.loadPublicKey()
            let rs256: JSONValue = .object(["alg": .string("RS256"), "typ": .string("JWT")])
            let login: JSONValue = .object([
                "iss": .string("x"), "sub": .string(publicKey.fingerprint), "amr": .array([.string("swk")]),
            ])
            let proof: JSONValue = .object(["alg": .string("RS256"), "typ": .string("dpop+jwt")])
            for signable in [Self.input(rs256, login), Self.input(proof, .object(["htm": .string("GET")]))] {
                let answer = server.answer(Self.sign(signable))
                #expect(answer.ok, "\(answer.message ?? "")")
                let signature = try #require(answer.signature.flatMap { Base64URL.decode($0) })
                #expect(publicKey.isValidSignature(signature, for: signable))
            }
            let refused = [
                // The approval of a new device, stating a PIN nobody typed.
                Self.input(
                    rs256,
                    .object(["approve_kid": .string("kid"), "amr": .array([.string("swk"), .string("pin")])])),
                Self.input(rs256, .object(["amr": .array([.string("hwk"), .string("user")])])),
                Self.input(rs256, .object(["amr": .string("pin")])),
                // A host login's statement, which only pam_keyauth's helper makes, after the PIN.
                Self.input(
                    rs256,
                    .object([
                        "sub": .string(publicKey.fingerprint), "amr": .array([.string("swk")]),
                        "host_login": .object([
                            "host": .string("db1"), "service": .string("sshd"), "linux_user": .string("alice"),
                        ]),
                    ])),
                Self.input(.object(["alg": .string("none")]), login),
                Self.input(.object(["alg": .string("RS512")]), login),
                Array("session data".utf8), Array("a.b".utf8), Self.input(rs256, login) + Array(".x".utf8),
            ]
            for input in refused {
                let answer = server.answer(Self.sign(input))
                #expect(!answer.ok && answer.error == KeyAuthError.Code.invalidArgument.rawValue)
                #expect(answer.signature == nil)
            }
        }
    }
}
