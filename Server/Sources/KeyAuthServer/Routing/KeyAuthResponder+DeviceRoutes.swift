import KeyAuth

/// The device API: registration, the caller's devices and recovery codes (PROTOCOL.md sections 4
/// and 5).
extension KeyAuthResponder {
    /// Device registration and the caller's devices (sections 4 and 5).
    static let deviceRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.post], "/v1/devices",
            .api { responder, request, _, caller in
                try responder.register(request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], "/v1/attestation-nonces",
            .api { responder, _, _, _ in
                try responder.attestationNonce()
            }),
        RouteDeclaration(
            [.post], "/v1/devices/attestation",
            .api { responder, request, _, caller in
                try responder.attestDevice(request, caller: &caller)
            }),
        RouteDeclaration(
            [.get], "/v1/devices",
            .api { responder, request, _, caller in
                try responder.listDevices(request, caller: &caller)
            }),
        RouteDeclaration(
            [.delete], "/v1/devices/{kid}",
            .api { responder, request, parameters, caller in
                try responder.revokeDevice(parameters["kid"], request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], "/v1/devices/{kid}/approve",
            .api { responder, request, parameters, caller in
                try responder.approveDevice(parameters["kid"], request, caller: &caller)
            }),
        RouteDeclaration(
            [.post], "/v1/recovery-codes",
            .api { responder, request, _, caller in
                try responder.makeRecoveryCodes(request, caller: &caller)
            }),
    ])

    /// `POST /v1/devices`: under the registration budget, since each one stores a row.
    func register(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        try limits.run(from: clientKey(request), everyAttempt: .registrations, record: metrics.recordRegistration) {
            let registration = try request.registrationRequest()
            let outcome = try service.register(registration, from: clientAddress(of: request))
            if let device = outcome.device { caller.identify(device) }
            return registrationResponse(outcome)
        }
    }

    /// `POST /v1/attestation-nonces`: a nonce for a TPM to sign into its attestation. Nothing
    /// is stored (the nonce is an HMAC of its time), so it needs no budget of its own.
    func attestationNonce() throws -> HTTPResponse {
        let (nonce, lifetime) = try service.attestationNonce()
        return .json(
            .object(["nonce": .string(nonce), "expires_in": .integer(lifetime)]), headers: ["Cache-Control": "no-store"]
        )
    }

    /// `POST /v1/devices/attestation`: a registered device's attestation, authenticated by its
    /// assertion in the body. Under the registration budget: like a registration it costs the
    /// server a credential challenge (an RSA encryption) before anything proves the TPM.
    func attestDevice(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        try limits.run(from: clientKey(request), everyAttempt: .registrations, record: { _ in }) {
            switch try service.attestDevice(try request.deviceAttestationRequest()) {
            case .activationRequired(let challenge):
                return (
                    .json(challenge.jsonValue, status: 202, headers: ["Cache-Control": "no-store"]),
                    ActivationChallenge.status
                )
            case .attested(let device, let answer):
                caller.identify(device)
                return (.json(answer.jsonValue), answer.tier.rawValue)
            }
        }
    }

    /// `GET /v1/devices`: one page of the caller's devices.
    func listDevices(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        let query = try request.deviceListQuery()
        let page = try service.listDevices(of: actor, after: query.position, limit: query.limit)
        return .json(deviceListPage(page.devices, next: page.next).jsonValue)
    }

    /// `DELETE /v1/devices/{kid}`: revokes one of the caller's devices, or denies a pending one.
    func revokeDevice(_ kid: String, _ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        try service.revoke(kid: kid, ownedBy: actor.user, by: .device(kid: actor.kid))
        return HTTPResponse(status: 204, headers: ["Cache-Control": "no-store"])
    }

    /// `POST /v1/devices/{kid}/approve`: needs a device assertion naming the pending device.
    func approveDevice(_ kid: String, _ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        return .json(approvalEntry(try service.approve(kid: kid, assertion: try request.deviceApproval(), by: actor)))
    }

    /// `POST /v1/recovery-codes`: a new set for the caller's user, with a device assertion
    /// naming it. Like every JSON answer it is `no-store`: it holds the only copy of the codes.
    func makeRecoveryCodes(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let actor = try authenticate(request, identifying: &caller)
        let codes = try service.makeRecoveryCodes(assertion: try request.deviceApproval(), by: actor)
        return .json(.object(["user": .string(actor.user), "codes": .array(codes.map(JSONValue.string))]))
    }
}
