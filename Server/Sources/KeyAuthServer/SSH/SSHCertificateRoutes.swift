import KeyAuth

/// The SSH certificate authority's endpoints (PROTOCOL.md section 11).
extension KeyAuthResponder {
    static let sshRoutes = RouteTable<Endpoint>([
        RouteDeclaration(
            [.post], "/v1/ssh/certificates",
            .api { responder, request, _, caller in
                try responder.issueSSHCertificate(request, caller: &caller)
            }),
        RouteDeclaration(
            [.get, .head], "/v1/ssh/ca",
            .api { responder, request, _, _ in
                let issuer = try responder.sshAuthority()
                try responder.limits.count(responder.clientKey(request), against: .sshFetches)
                return HTTPResponse(
                    status: 200,
                    headers: ["Content-Type": "text/plain; charset=utf-8", "Cache-Control": "public, max-age=300"],
                    body: Array(issuer.authorities.current.lines(at: issuer.now()).utf8))
            }),
        RouteDeclaration(
            [.get, .head], "/v1/ssh/krl",
            .api { responder, request, _, _ in try responder.sshRevocationList(request) }),
    ])

    /// The issuer, or 404 on a server without `--ssh-ca-key-file`.
    func sshAuthority() throws -> SSHCertificateIssuer {
        guard let sshCertificates else {
            throw RoutingError(.notFound, "this server issues no SSH certificates (it has no --ssh-ca-key-file)")
        }
        return sshCertificates
    }

    /// `GET /v1/ssh/krl`: the cached list, or 304 when `If-None-Match` names it; under the
    /// per-address fetch budget, since anyone may ask.
    func sshRevocationList(_ request: HTTPRequest) throws -> HTTPResponse {
        let issuer = try sshAuthority()
        try limits.count(clientKey(request), against: .sshFetches)
        let list = try issuer.servedRevocationList(from: service.registry)
        let headers: HTTPHeaders = [
            "Content-Type": "application/octet-stream", "Cache-Control": "public, max-age=60", "ETag": list.entityTag,
        ]
        if list.isNamed(byIfNoneMatch: request.headers["If-None-Match"]) {
            return HTTPResponse(status: 304, headers: headers)
        }
        return HTTPResponse(status: 200, headers: headers, body: list.bytes)
    }

    /// `POST /v1/ssh/certificates`: a certificate for the calling device's own key.
    func issueSSHCertificate(_ request: HTTPRequest, caller: inout Caller) throws -> HTTPResponse {
        let issuer = try sshAuthority()
        let device = try authenticate(request, identifying: &caller)
        try limits.count(.other(device.kid), against: .sshCertificates)
        // What a login checks, again: a certificate outlives the access token that asked for it.
        try service.applyDevicePolicy(device.tier, at: "ssh-certificate", kid: device.kid, user: device.user)
        try service.refuseWhileAnnounced(device, "get SSH certificates")
        let issued = try issuer.issue(for: device)
        let certificate = issued.certificate
        return .json(
            .object([
                "certificate": .string(issued.line),
                "serial": .string(String(certificate.serial)),
                "key_id": .string(certificate.keyID),
                "principals": .array(certificate.principals.map(JSONValue.string)),
                "valid_after": .integer(Int64(clamping: certificate.validAfter)),
                "valid_before": .integer(Int64(clamping: certificate.validBefore)),
            ]),
            status: 201, headers: ["Cache-Control": "no-store"])
    }
}
