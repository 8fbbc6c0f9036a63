import KeyAuth

/// What the agent's `sign` request signs: a JWS signing input for RS256 whose payload states no
/// presence check.
///
/// The agent holds the key without asking anyone: any process of the user can reach its socket
/// while it is unlocked. It may sign what a login through it sends (an assertion stating `swk`
/// or `hwk` alone) and DPoP proofs, as PROTOCOL.md section 7.1 says; an assertion stating `pin`
/// or `user` would tell the server a person was asked when nobody was, and the server takes
/// that statement for approving a device or making recovery codes. Bytes that are not a JWS
/// signing input are refused too, so that the socket is no signing oracle for another protocol,
/// and so is a host login's statement (`host_login`).
enum KeyAgentSigningPolicy {
    /// Why the agent refuses to sign `input`, or nil when it may.
    static func refusal(_ input: [UInt8]) -> String? {
        let parts = input.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 2, let header = object(parts[0]), let payload = object(parts[1]) else {
            return "the agent signs only a JWS signing input: base64url header, a dot, base64url payload"
        }
        guard header["alg"]?.stringValue == "RS256" else { return "the agent signs only RS256 tokens" }
        if let stated = payload["amr"] {
            guard let methods = stated.arrayValue?.compactMap(\.stringValue), methods.count == stated.arrayValue?.count
            else { return "the token's amr is not a list of strings" }
            if methods.contains(where: AuthenticationMethod.presenceChecks.contains) {
                return "the agent checked no presence, so it signs no token that states one (amr \(methods)); "
                    + "sign without the agent, after the PIN"
            }
        }
        // pam_keyauth's helper never asks the agent: a host login checks the PIN. One the agent
        // signed would put a login the user never made into the server's audit trail.
        if payload["host_login"] != nil {
            return "the agent signs no host login: pam_keyauth asks for the PIN itself"
        }
        return nil
    }

    /// The JSON object a base64url segment holds, or nil.
    private static func object(_ segment: ArraySlice<UInt8>) -> [String: JSONValue]? {
        guard let bytes = Base64URL.decode(String(decoding: segment, as: UTF8.self)),
            let value = try? JSONValue(parsing: bytes)
        else { return nil }
        return value.objectValue
    }
}
