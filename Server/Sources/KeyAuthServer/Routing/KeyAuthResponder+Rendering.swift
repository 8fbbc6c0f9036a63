import KeyAuth

/// The documents the endpoints answer with, written by the protocol's wire types
/// (PROTOCOL.md section 4).
extension KeyAuthResponder {
    /// `{"access_token":...,"expires_in":...,"token_type":"Bearer"}`, never cached.
    static func tokenResponse(_ result: LoginResult) -> HTTPResponse {
        .json(
            serialized: TokenResponse(accessToken: result.accessToken, expiresIn: result.expiresIn).jsonBytes,
            headers: ["Cache-Control": "no-store", "Pragma": "no-cache"])
    }

    /// 201 for a new active device, 202 for a pending one, 200 for a key already registered, with
    /// the device as recorded; and the result the metrics count.
    func registrationResponse(_ outcome: RegistrationOutcome) -> (HTTPResponse, String) {
        let device = outcome.device
        let (status, result) =
            switch outcome {
            case .active: (201, "active")
            case .pending: (202, "pending")
            case .existing: (200, "existing")
            }
        let answer = RegistrationResponse(
            keyID: device.kid, user: device.user, name: device.name, status: service.visibleStatus(device))
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
        Device(
            keyID: device.kid, name: device.name, status: service.visibleStatus(device),
            createdAt: RFC3339.string(fromSeconds: device.createdAt),
            lastLoginAt: device.lastLoginAt.map(RFC3339.string(fromSeconds:)), registeredFrom: device.registeredFrom)
    }
}
