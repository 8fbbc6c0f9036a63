/// Device management as ``KeyAuthClient`` performs it (PROTOCOL.md section 4): listing the
/// caller's devices page by page, approving a pending one, and revoking or denying one; each
/// request carries the device's access token, with a DPoP proof for a bound token.
extension KeyAuthClient {
    /// Devices asked for per page of `GET /v1/devices` (`limit`).
    public static let devicePageSize = 100
    /// Pages followed at most: a server that keeps answering with a `next_cursor`, by mistake or
    /// on purpose, cannot keep the client fetching (and holding the answers) without end.
    public static let maximumDevicePages = 10

    /// Lists the caller's devices (`GET /v1/devices?limit=100`), following `next_cursor` for up
    /// to ``maximumDevicePages`` pages.
    ///
    /// - Returns: the devices; marked truncated when the server still had a `next_cursor` after
    ///   the last page read.
    /// - Throws: `.serverRejected` with `invalid_token` when the token is expired or revoked; for
    ///   an answer without a `devices` array, an entry without `kid` or `status`, a
    ///   `registered_from` that is neither a string nor null, or a `next_cursor` that is not a
    ///   non-empty string (or repeats one already followed).
    public func listDevices(accessToken: AccessToken, proofs: DPoPProofBuilder? = nil) async throws(KeyAuthError)
        -> DeviceList
    {
        var devices: [Device] = []
        var followed: Set<String> = []
        var path = "/v1/devices?limit=\(Self.devicePageSize)"
        for _ in 0..<Self.maximumDevicePages {
            let reply = try await send("GET", path, accessToken: accessToken, proofs: proofs)
            let object = try expectObject(reply, success: [200], operation: "device list")
            let page: DeviceListPage
            do {
                page = try DeviceListPage(jsonValue: .object(object))
            } catch {
                throw malformed(error, document: "the device list", operation: "device list")
            }
            devices += page.devices
            guard let cursor = page.nextCursor else { return DeviceList(devices: devices, isTruncated: false) }
            guard !followed.contains(cursor) else {
                throw KeyAuthError(.serverRejected, "the device list of \(serverURL) has an invalid next_cursor")
            }
            followed.insert(cursor)
            path = "/v1/devices?limit=\(Self.devicePageSize)&cursor=" + FormURLEncoding.encode(cursor)
        }
        return DeviceList(devices: devices, isTruncated: true)
    }

    /// Approves a pending device of the same user (`POST /v1/devices/{kid}/approve`).
    ///
    /// - Parameters:
    ///   - keyID: the pending device.
    ///   - assertion: a fresh device assertion of this device, signed after its presence check,
    ///     with the claims `approve_kid` (the pending device's key id) and `amr`: the server
    ///     takes no approval on an access token alone.
    ///   - accessToken: this device's access token.
    ///   - proofs: the device key's proof builder, for a DPoP-bound `accessToken`.
    /// - Returns: the device as the server recorded it, with its name, creation time and the
    ///   address it registered from, so that the caller can show what was let in.
    /// - Throws: `.invalidArgument` for a kid that is not a fingerprint; `.serverRejected` with
    ///   `not_found` for an unknown device or another user's, `invalid_grant` for a refused
    ///   assertion, and for an answer that is not the entry of the device asked for.
    @discardableResult
    public func approveDevice(
        keyID: String, assertion: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil
    ) async throws(KeyAuthError) -> Device {
        let path = "/v1/devices/" + (try Self.checkedKeyID(keyID)) + "/approve"
        let body = JSONValue.object(["assertion": .string(assertion)])
        let reply = try await send(
            "POST", path, body: Array(body.serialized().utf8), contentType: "application/json",
            accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200], operation: "approval")
        let device: Device
        do {
            device = try Device(jsonValue: .object(object))
        } catch {
            throw malformed(WireFormatError(error.problem, isInEntry: true), document: "", operation: "approval")
        }
        guard device.keyID == keyID else {
            throw KeyAuthError(.serverRejected, "the approval answer of \(serverURL) names another device")
        }
        return device
    }

    /// Makes a new set of recovery codes for the account's user (`POST /v1/recovery-codes`),
    /// replacing the old set: the codes are in the answer and nowhere else.
    ///
    /// - Parameter assertion: a fresh assertion of this device naming the user in
    ///   `recovery_codes`, signed after a presence check.
    /// - Throws: `.serverRejected` (`invalid_grant` for an assertion without a presence check),
    ///   also for an answer without codes; `.transportFailed`.
    package func makeRecoveryCodes(
        assertion: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil
    ) async throws(KeyAuthError) -> [String] {
        let body = JSONValue.object(["assertion": .string(assertion)])
        let reply = try await send(
            "POST", "/v1/recovery-codes", body: Array(body.serialized().utf8), contentType: "application/json",
            accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200], operation: "recovery codes")
        guard let entries = object["codes"]?.arrayValue, !entries.isEmpty else {
            throw KeyAuthError(.serverRejected, "the recovery codes answer of \(serverURL) has no codes")
        }
        var codes: [String] = []
        for entry in entries {
            guard let code = entry.stringValue else {
                throw KeyAuthError(
                    .serverRejected, "the recovery codes answer of \(serverURL) has a code that is not text")
            }
            codes.append(code)
        }
        return codes
    }

    /// Revokes one of the caller's devices, or denies a pending one (`DELETE /v1/devices/{kid}`).
    ///
    /// - Throws: `.invalidArgument` for a kid that is not a fingerprint; `.serverRejected` with
    ///   `not_found` for an unknown device, `access_denied` for another user's device.
    public func revokeDevice(keyID: String, accessToken: AccessToken, proofs: DPoPProofBuilder? = nil)
        async throws(KeyAuthError)
    {
        let path = "/v1/devices/" + (try Self.checkedKeyID(keyID))
        let reply = try await send("DELETE", path, accessToken: accessToken, proofs: proofs)
        try expectSuccess(reply, success: [200, 204], operation: "revocation")
    }

    /// A kid goes into a URL path, so only the base64url alphabet is accepted.
    static func checkedKeyID(_ keyID: String) throws(KeyAuthError) -> String {
        guard InputRules.isValidKeyID(keyID) else {
            throw KeyAuthError(.invalidArgument, "a device id is 43 characters of base64url (A-Z a-z 0-9 - _)")
        }
        return keyID
    }

    /// Whether `keyID` has the shape of an RFC 7638 SHA-256 thumbprint, as the server requires.
    public static func isValidKeyID(_ keyID: String) -> Bool {
        InputRules.isValidKeyID(keyID)
    }
}
