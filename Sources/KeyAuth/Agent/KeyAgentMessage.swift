import Foundation

/// A request to `keyauth agent` (PROTOCOL.md section 7.1), one JSON object per framed message.
package struct KeyAgentRequest: Codable, Sendable {
    /// `status`, `sign`, `unlock`, `lock` or `stop`.
    package var op: String
    /// For `sign`: the signing input (`header.payload`), base64url.
    package var input: String?
    /// For `sign`: the key ID the client expects, so that an agent holding another key refuses.
    package var keyID: String?
    /// For `unlock`: the PIN's UTF-8 bytes, base64url, when the account has one.
    package var pin: String?
    /// For `unlock`: how long to hold the key, in seconds.
    package var timeout: Double?

    package init(
        op: String, input: String? = nil, keyID: String? = nil, pin: String? = nil, timeout: Double? = nil
    ) {
        self.op = op
        self.input = input
        self.keyID = keyID
        self.pin = pin
        self.timeout = timeout
    }
}

/// The agent's answer to one ``KeyAgentRequest``.
package struct KeyAgentResponse: Codable, Sendable {
    package var ok: Bool
    /// On failure: a ``KeyAuthError/Code`` raw value (`locked`, `wrong_pin`, ...).
    package var error: String?
    /// On failure: one line for a person.
    package var message: String?
    /// The account the agent serves.
    package var account: String?
    /// The key ID of that account's device key.
    package var keyID: String?
    /// Whether the agent holds nothing usable now.
    package var locked: Bool?
    /// When what it holds is cleared, in seconds since 1970.
    package var expiresAt: Double?
    /// For `sign`: the JWS signature, base64url.
    package var signature: String?

    package init(ok: Bool) { self.ok = ok }

    package static func failure(_ code: String, _ message: String) -> KeyAgentResponse {
        var response = KeyAgentResponse(ok: false)
        response.error = code
        response.message = message
        return response
    }
}

extension KeyAgentSocket {
    /// Sends `request` on a new connection to `path` and returns the answer; nil when no agent
    /// answers there.
    ///
    /// - Throws: `.agentUntrusted` from ``connect(to:)``, before anything is sent.
    package static func exchange(_ request: KeyAgentRequest, at path: String) throws(KeyAuthError) -> KeyAgentResponse?
    {
        guard let descriptor = try connect(to: path) else { return nil }
        defer { close(descriptor) }
        guard var body = try? JSONEncoder().encode(request) else { return nil }
        defer { body.resetBytes(in: 0..<body.count) }
        guard writeMessage(descriptor, Array(body)), let answer = readMessage(descriptor) else { return nil }
        return try? JSONDecoder().decode(KeyAgentResponse.self, from: Data(answer))
    }
}
