import KeyAuth

/// The documents the endpoints answer with, written by the protocol's wire types
/// (PROTOCOL.md section 4).
extension KeyAuthResponder {
    /// 201 for a new active device, 202 for a pending one, 200 for a key already registered, with
    /// the device as recorded; and the result the metrics count.
    func registrationResponse(_ outcome: RegistrationOutcome) -> (HTTPResponse, String) {
        let status: Int
        let result: String
        let device: DeviceRecord
        switch outcome {
        case .active(let record): (status, result, device) = (201, "active", record)
        case .pending(let record): (status, result, device) = (202, "pending", record)
        case .existing(let record): (status, result, device) = (200, "existing", record)
        case .activationRequired(let challenge):
            return (
                .json(challenge.jsonValue, status: 202, headers: ["Cache-Control": "no-store"]),
                ActivationChallenge.status
            )
        }
        let answer = RegistrationResponse(
            keyID: device.kid, user: device.user, name: device.name, status: service.visibleStatus(device),
            tier: device.tier)
        return (.json(answer.jsonValue, status: status), result)
    }

    /// One page of the device list.
    func deviceListPage(_ devices: [DeviceRecord], next: DeviceListPosition?) -> DeviceListPage {
        DeviceListPage(devices: devices.map(deviceEntry), nextCursor: next.map(DeviceListCursor.encode))
    }

    /// The approved device as the list shows it, with its user, so that the client can show what
    /// it approved: name, creation time and where the request came from.
    func approvalEntry(_ device: DeviceRecord) -> JSONValue {
        var fields = deviceEntry(device).jsonMembers
        fields["user"] = .string(device.user)
        return .object(fields)
    }

    /// A device as the device list shows it (PROTOCOL.md section 4, "Device list").
    func deviceEntry(_ device: DeviceRecord) -> Device {
        var entry = Device(
            keyID: device.kid, name: device.name, status: service.visibleStatus(device),
            createdAt: RFC3339.string(fromSeconds: device.createdAt),
            lastLoginAt: device.lastLoginAt.map(RFC3339.string(fromSeconds:)), registeredFrom: device.registeredFrom)
        entry.tier = device.tier
        return entry
    }

    /// The CIBA acknowledgement (section 7.3): the request's id, its lifetime and the interval.
    static func backchannelResponse(_ request: SignInRequestRecord, now: Int64) -> HTTPResponse {
        .json(
            .object([
                "auth_req_id": .string(request.id),
                "expires_in": .integer(max(request.expiresAt.subtractingSaturating(now), 0)),
                "interval": .integer(request.pollInterval),
            ]))
    }

    /// The open requests as a device sees them, with the cursor of the newest one (or `after`,
    /// when none is newer).
    func signInRequestList(_ requests: [SignInRequestRecord], after: SignInRequestPosition) throws(StorageError)
        -> SignInRequestList
    {
        let newest = requests.map(\.position).max().map { max($0, after) } ?? after
        return SignInRequestList(
            requests: try requests.map { record throws(StorageError) in try signInRequestEntry(record) },
            cursor: SignInRequestCursor.encode(newest))
    }

    /// One request as a device sees it.
    func signInRequestEntry(_ record: SignInRequestRecord) throws(StorageError) -> SignInRequest {
        // No binding message: the code is shown where the sign-in started, never to the device.
        SignInRequest(
            id: record.id, kind: SignInRequest.Kind(rawValue: record.kind.rawValue),
            clientName: try service.requesterName(of: record), requestedFrom: record.requestedFrom, scope: record.scope,
            createdAt: RFC3339.string(fromSeconds: record.createdAt),
            expiresAt: RFC3339.string(fromSeconds: record.expiresAt))
    }
}
