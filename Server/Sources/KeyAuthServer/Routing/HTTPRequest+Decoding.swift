import KeyAuth

/// Reading what a request carries, in one place for every endpoint: the JSON body of registration, the Bearer token and the device list's query.
///
/// Every failure is ``ServiceError`` `.invalidRequest` (`.invalidToken` for the Bearer token)
/// with a description that names the problem and never echoes a value.
extension HTTPRequest {
    /// The registration body (`application/json`).
    ///
    /// - Throws: `.invalidRequest` for another content type or a body ``RegistrationRequest``
    ///   refuses.
    func registrationRequest() throws(ServiceError) -> RegistrationRequest {
        try requireContentType("application/json")
        do {
            return try RegistrationRequest(json: body)
        } catch {
            throw ServiceError(.invalidRequest, error.problem)
        }
    }

    /// The JSON body of `POST /v1/devices/attestation`.
    func deviceAttestationRequest() throws(ServiceError) -> DeviceAttestationRequest {
        try requireContentType("application/json")
        do {
            return try DeviceAttestationRequest(json: body)
        } catch {
            throw ServiceError(.invalidRequest, error.problem)
        }
    }

    /// The `Authorization` header, or nil without one.
    ///
    /// A request carries one: `Authorization` is a singleton field (RFC 9110 section 11.6.2), and
    /// RFC 6750 section 3.1 makes presenting more than one credential `invalid_request`. Reading
    /// the first of two would let a proxy in front check one header (many keep the last) while
    /// the server acts on the other, with the rights of a token or client the proxy never saw.
    ///
    /// - Throws: `.invalidRequest` when there is more than one.
    func authorization() throws(ServiceError) -> String? {
        let values = headers.values(for: "Authorization")
        guard values.count <= 1 else {
            throw ServiceError(.invalidRequest, "a request carries at most one Authorization header")
        }
        return values.first
    }

    /// The `DPoP` header (RFC 9449), or nil without one.
    ///
    /// - Throws: `.invalidDPoPProof` when there is more than one (section 4.3, check 1).
    func dpopProof(atResource: Bool) throws(ServiceError) -> String? {
        let values = headers.values(for: "DPoP")
        guard values.count <= 1 else {
            throw ServiceError(.invalidDPoPProof(atResource: atResource), "a request carries at most one DPoP proof")
        }
        return values.first.map { Substring($0).trimmingWhitespace() }
    }

    /// The `limit` and `cursor` of `GET /v1/devices` (PROTOCOL.md section 4, "Device list").
    ///
    /// - Throws: `.invalidRequest` for a limit outside 1 to 100 or a cursor this server did not
    ///   write.
    func deviceListQuery() throws(ServiceError) -> (limit: Int, position: DeviceListPosition) {
        var limit = DeviceListCursor.defaultLimit
        if let text = query["limit"] {
            guard let value = Int(text), DeviceListCursor.limits.contains(value) else {
                throw ServiceError(
                    .invalidRequest,
                    "limit must be a number from \(DeviceListCursor.limits.lowerBound) to "
                        + "\(DeviceListCursor.limits.upperBound)")
            }
            limit = value
        }
        var position = DeviceListPosition.start
        if let cursor = query["cursor"] {
            guard let decoded = DeviceListCursor.decode(cursor) else {
                throw ServiceError(.invalidRequest, "cursor is not one this server gave out")
            }
            position = decoded
        }
        return (limit, position)
    }

    func requireContentType(_ expected: String) throws(ServiceError) {
        guard let value = headers["Content-Type"], HTTPHeaders.mediaType(of: value, is: expected) else {
            throw ServiceError(.invalidRequest, "the Content-Type must be \(expected)")
        }
    }
}

extension Substring {
    /// The text without leading and trailing spaces and tabs.
    func trimmingWhitespace() -> String {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" { text.removeLast() }
        return String(text)
    }
}
