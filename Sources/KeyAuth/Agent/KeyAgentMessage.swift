import Foundation

/// A request to `keyauth agent` (PROTOCOL.md section 7.1), one JSON object per framed message.
///
/// A PIN never travels inside the JSON: text that a JSON encoder or decoder made cannot be
/// zeroed afterwards. An `unlock` with a PIN says so with `pinFrame` and sends the PIN's UTF-8
/// bytes as the next frame on the same connection, which both ends hold in buffers they wipe.
package struct KeyAgentRequest: Codable, Sendable {
    /// `status`, `sign`, `unlock`, `lock` or `stop`.
    package var op: String
    /// For `sign`: the signing input (`header.payload`), base64url.
    package var input: String?
    /// For `sign`: the key ID the client expects, so that an agent holding another key refuses.
    package var keyID: String?
    /// For `unlock`: true when the next frame holds the PIN's UTF-8 bytes.
    package var pinFrame: Bool?
    /// For `unlock`: how long to hold the key, in seconds.
    package var timeout: Double?
    /// Whether the JSON carried a `pin` member, as clients before the PIN frame sent it. The
    /// value itself is never decoded; the agent refuses such a request and says why.
    package private(set) var hadInlinePIN = false

    package init(
        op: String, input: String? = nil, keyID: String? = nil, pinFrame: Bool? = nil, timeout: Double? = nil
    ) {
        self.op = op
        self.input = input
        self.keyID = keyID
        self.pinFrame = pinFrame
        self.timeout = timeout
    }

    private enum CodingKeys: String, CodingKey {
        case op, input, keyID, pinFrame, timeout, pin
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        op = try container.decode(String.self, forKey: .op)
        input = try container.decodeIfPresent(String.self, forKey: .input)
        keyID = try container.decodeIfPresent(String.self, forKey: .keyID)
        pinFrame = try container.decodeIfPresent(Bool.self, forKey: .pinFrame)
        timeout = try container.decodeIfPresent(Double.self, forKey: .timeout)
        hadInlinePIN = container.contains(.pin)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(op, forKey: .op)
        try container.encodeIfPresent(input, forKey: .input)
        try container.encodeIfPresent(keyID, forKey: .keyID)
        try container.encodeIfPresent(pinFrame, forKey: .pinFrame)
        try container.encodeIfPresent(timeout, forKey: .timeout)
    }
}

/// The agent's answer to one ``KeyAgentRequest``.
package struct KeyAgentResponse: Codable, Sendable {
    package var ok: Bool
    /// On failure: a ``KeyAuthError/Code`` raw value (`locked`, `wrong_pin`, ...).
    package var error: String?
    /// On failure: one line for a person.
    package var message: String?
    /// On a `wrong_pin` or `locked_out` failure: seconds until the next PIN may be tried, so
    /// that the client does not ask for one that would be refused unread.
    package var retryAfter: Int?
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

    /// The failure that carries `error`: its code, message and retry wait.
    package static func failure(_ error: KeyAuthError) -> KeyAgentResponse {
        var response = failure(error.code.rawValue, error.message)
        response.retryAfter = error.retryAfter
        return response
    }
}

extension KeyAgentSocket {
    /// Sends `request` on a new connection to `path` and returns the answer; nil when no agent
    /// answers there.
    ///
    /// With a `pin`, the request says `pinFrame` and the PIN's bytes follow as a frame of their
    /// own, written straight from `pin`'s memory, so that no copy of them is left behind here.
    ///
    /// - Throws: `.agentUntrusted` from ``connect(to:)``, before anything is sent.
    package static func exchange(
        _ request: KeyAgentRequest, at path: String, pin: SecretBytes? = nil
    ) throws(KeyAuthError) -> KeyAgentResponse? {
        var request = request
        if pin != nil { request.pinFrame = true }
        guard let descriptor = try connect(to: path) else { return nil }
        defer { close(descriptor) }
        guard let body = try? JSONEncoder().encode(request) else { return nil }
        guard writeMessage(descriptor, Array(body)) else { return nil }
        if let pin {
            guard pin.withUnsafeBytes({ writeMessage(descriptor, buffer: $0) }) else { return nil }
        }
        guard let answer = readMessage(descriptor, deadline: .now + clientWait) else { return nil }
        return try? JSONDecoder().decode(KeyAgentResponse.self, from: Data(answer))
    }
}
