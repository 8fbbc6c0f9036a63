import KeyAuth

/// The HTTP face of the server: routes requests, parses bodies, applies the rate limit, and
/// turns results and errors into responses; also counts metrics (served by ``operations`` on
/// the metrics listener) and writes the request log.
///
/// Plain Swift with no socket in sight, so every rule of PROTOCOL.md is testable by calling
/// ``respond(to:)`` with ``HTTPRequest`` values.
public final class KeyAuthResponder: HTTPResponder {
    let service: KeyAuthService
    let signingKeys: ServerSigningKeys
    /// Failed logins and registrations per address.
    let rateLimiter: AddressRateLimiter
    /// Registration attempts per address, successful or not.
    let registrationLimiter: AddressRateLimiter
    let metrics = ServerMetrics()
    /// The metrics listener's application, sharing this one's metrics and storage.
    public let operations: OperationsResponder
    let log: any ServerLog
    let trustProxy: Bool
    let logRequests: Bool
    let maximumBodySize: Int
    /// The issuer URL all tokens name.
    public let issuer: String

    /// Builds the application on `storage`, loading the server's signing key (from the key file
    /// when one is configured, else from storage) or creating one.
    ///
    /// - Parameters:
    ///   - configuration: the settings (issuer aside).
    ///   - issuer: the resolved issuer URL.
    ///   - storage: an open store.
    ///   - log: where request and error lines go.
    ///   - now: the clock (tests move it).
    /// - Throws: ``StorageError``, or `KeyAuthError` when the signing key cannot be created or
    ///   read.
    public init(
        configuration: ServerConfiguration, issuer: String, storage: any ServerStorage,
        log: any ServerLog = StandardErrorLog(), now: @escaping @Sendable () -> Int64 = ServerClock.now
    ) throws {
        // The decoys for the common key sizes (2048, 3072, 4096 bits), made now so that no
        // request pays for them.
        try DecoyKeys.shared.prepare([256, 384, 512])
        let keys =
            if let file = configuration.signingKeyFile {
                try ServerSigningKeys.load(file: file)
            } else {
                try ServerSigningKeys.loadOrCreate(storage: storage, bits: configuration.signingKeyBits, now: now())
            }
        let settings = KeyAuthService.Settings(
            issuer: issuer, enrollment: configuration.enrollment, pendingLifetime: configuration.pendingLifetime,
            maximumPendingDevices: configuration.maximumPendingDevices, deviceRetention: configuration.deviceRetention,
            accessTokenLifetime: configuration.accessTokenLifetime)
        let clock = KeyAuthClock.seconds(now)
        service = KeyAuthService(
            settings: settings, storage: storage,
            tokens: AccessTokens(keys: keys, issuer: issuer, lifetime: configuration.accessTokenLifetime, clock: clock),
            enrollmentCodes: EnrollmentCodes(
                storage: storage, lifetime: configuration.enrollmentCodeLifetime, now: now),
            assertions: DeviceAssertionVerifier(audience: issuer, clock: clock),
            loginKeys: LoginKeys(cache: DeviceKeyCache(), decoys: .shared), now: now)
        signingKeys = keys
        operations = OperationsResponder(metrics: metrics, storage: storage)
        rateLimiter = AddressRateLimiter(
            limit: configuration.failureLimit, window: configuration.failureWindowSeconds, now: now)
        registrationLimiter = AddressRateLimiter(
            limit: configuration.registrationLimit, window: configuration.failureWindowSeconds, now: now)
        self.log = log
        self.trustProxy = configuration.trustProxy
        self.logRequests = configuration.logRequests
        self.maximumBodySize = configuration.maximumBodySize
        self.issuer = issuer
    }

    public func respond(to request: HTTPRequest) -> HTTPResponse {
        let start = ServerClock.monotonicNanoseconds()
        let route = Route(path: request.path)
        var response: HTTPResponse
        do {
            response = try dispatch(request, route: route)
        } catch {
            if !(error is ServiceError) {
                log.error("\(request.method) \(route?.label ?? "unknown path"): \(error)")
            }
            response = HTTPResponse(error: error)
        }
        let seconds = Double(ServerClock.monotonicNanoseconds() - start) / 1e9
        metrics.recordRequest(
            route: route?.label ?? "unknown", method: Self.methodLabel(request.method), status: response.status,
            seconds: seconds)
        if logRequests {
            // Unknown paths are cut short: a confused client may put anything in a path.
            let path = route == nil ? String(request.path.prefix(64)) : request.path
            log.request(method: request.method, path: path, status: response.status, milliseconds: seconds * 1000)
        }
        return response
    }

    /// Periodic housekeeping: forgets expired replay-cache entries, enrollment codes,
    /// rate-limit counters, and pending and denied devices past their retention.
    public func purgeExpired() {
        rateLimiter.purge()
        registrationLimiter.purge()
        do {
            let now = service.now()
            try service.storage.purgeExpiredJTIs(now: now)
            try service.storage.purgeExpiredEnrollmentCodes(now: now)
            try service.purgeStaleDevices()
        } catch {
            log.error("cleanup failed: \(error)")
        }
    }

    // MARK: Dispatch

    private func dispatch(_ request: HTTPRequest, route: Route?) throws -> HTTPResponse {
        // The transport enforces the limit while reading; this check keeps the rule true for
        // any other caller of the responder.
        if request.bodyTooLarge || request.body.count > maximumBodySize {
            throw ServiceError(.payloadTooLarge, "the request body is larger than \(maximumBodySize / 1024) KiB")
        }
        guard let route else { throw ServiceError(.notFound, "no such endpoint") }
        guard route.allowedMethods.contains(request.method) else {
            throw ServiceError(.methodNotAllowed(allowed: route.allowedMethods), "method not allowed on this endpoint")
        }
        switch (route, request.method) {
        case (.token, _):
            return try limited(request, record: metrics.recordLogin) { try token(request) }
        case (.devices, "POST"):
            return try limited(request, attempts: registrationLimiter, record: metrics.recordRegistration) {
                try register(request)
            }
        case (.devices, _):
            let actor = try service.authenticate(bearer: try bearerToken(request))
            return try deviceList(request, actor: actor)
        case (.device(let kid), _):
            let actor = try service.authenticate(bearer: try bearerToken(request))
            try service.revoke(kid: kid, by: actor)
            return HTTPResponse(status: 204, headers: ["Cache-Control": "no-store"])
        case (.approveDevice(let kid), _):
            let actor = try service.authenticate(bearer: try bearerToken(request))
            let device = try service.approve(kid: kid, by: actor)
            // The approved device as the list shows it, with its user, so that the client can
            // show what it approved: name, creation time and where the request came from.
            var fields = deviceEntry(device).jsonMembers
            fields["user"] = .string(device.user)
            return .json(.object(fields))
        case (.jwks, _):
            return .json(signingKeys.jwks, headers: ["Cache-Control": "public, max-age=300"])
        case (.openIDConfiguration, _):
            return .json(
                ServerMetadata(keyAuthServerAt: issuer).jsonValue, headers: ["Cache-Control": "public, max-age=300"])
        case (.health, _):
            return try operations.health()
        }
    }

    /// Runs a login or registration under the per-address limits, counting failures (client
    /// errors other than `authorization_pending`, which polling clients get by design) and
    /// recording the result for metrics.
    ///
    /// - Parameter attempts: a second budget that counts every attempt that gets past the
    ///   limits, successful or not (registrations: each valid one stores a device, pending ones
    ///   included, so even valid ones must not come in floods).
    private func limited(
        _ request: HTTPRequest, attempts: AddressRateLimiter? = nil, record: (String) -> Void,
        _ body: () throws -> (HTTPResponse, String)
    ) throws -> HTTPResponse {
        let address = RateLimitKey(address: clientAddress(of: request))
        if let retryAfter = rateLimiter.retryAfter(for: address) {
            record(OAuthError.Code.slowDown.rawValue)
            throw ServiceError(.slowDown(retryAfter: retryAfter), "too many failed attempts; retry later")
        }
        if let attempts {
            if let retryAfter = attempts.retryAfter(for: address) {
                record(OAuthError.Code.slowDown.rawValue)
                throw ServiceError(
                    .slowDown(retryAfter: retryAfter), "too many registrations from this address; retry later")
            }
            attempts.record(address)
        }
        do {
            let (response, result) = try body()
            record(result)
            return response
        } catch let error as ServiceError {
            record(error.kind.statusAndCode.code.rawValue)
            if error.kind != .authorizationPending { rateLimiter.record(address) }
            throw error
        } catch let error as StorageError {
            record(OAuthError.Code.temporarilyUnavailable.rawValue)
            throw error
        } catch {
            record(OAuthError.Code.serverError.rawValue)
            throw error
        }
    }

    // MARK: Endpoints

    private func token(_ request: HTTPRequest) throws -> (HTTPResponse, String) {
        try requireContentType(request, "application/x-www-form-urlencoded")
        let form: [String: String]
        do {
            form = try FormURLEncoding.decode(request.body)
        } catch {
            throw ServiceError(.invalidRequest, error.message)
        }
        guard let grantType = form["grant_type"], !grantType.isEmpty else {
            throw ServiceError(.invalidRequest, "grant_type is missing")
        }
        guard grantType == OAuthGrantType.jwtBearer.rawValue else {
            throw ServiceError(.unsupportedGrantType, "only \(OAuthGrantType.jwtBearer) is supported")
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            throw ServiceError(.invalidRequest, "assertion is missing")
        }
        let result = try service.login(assertion: assertion)
        let body = TokenResponse(accessToken: result.accessToken, expiresIn: result.expiresIn).jsonBytes
        return (.json(serialized: body, headers: ["Cache-Control": "no-store", "Pragma": "no-cache"]), "success")
    }

    private func register(_ request: HTTPRequest) throws -> (HTTPResponse, String) {
        try requireContentType(request, "application/json")
        let registration: RegistrationRequest
        do {
            registration = try RegistrationRequest(json: request.body)
        } catch {
            throw ServiceError(.invalidRequest, error.problem)
        }
        switch try service.register(registration, from: clientAddress(of: request)) {
        case .active(let device): return (.json(registrationEntry(device), status: 201), "active")
        case .pending(let device): return (.json(registrationEntry(device), status: 202), "pending")
        case .existing(let device): return (.json(registrationEntry(device), status: 200), "existing")
        }
    }

    /// `GET /v1/devices`: one page of the caller's devices (PROTOCOL.md section 4, "Device
    /// list"), so that no user's list, however long an attacker made it, becomes one huge answer.
    private func deviceList(_ request: HTTPRequest, actor: DeviceRecord) throws -> HTTPResponse {
        var limit = DeviceListCursor.defaultLimit
        if let text = request.query["limit"] {
            guard let value = Int(text), DeviceListCursor.limits.contains(value) else {
                throw ServiceError(
                    .invalidRequest,
                    "limit must be a number from \(DeviceListCursor.limits.lowerBound) to "
                        + "\(DeviceListCursor.limits.upperBound)")
            }
            limit = value
        }
        var position = DeviceListPosition.start
        if let cursor = request.query["cursor"] {
            guard let decoded = DeviceListCursor.decode(cursor) else {
                throw ServiceError(.invalidRequest, "cursor is not one this server gave out")
            }
            position = decoded
        }
        let page = try service.listDevices(of: actor, after: position, limit: limit)
        return .json(
            DeviceListPage(devices: page.devices.map(deviceEntry), nextCursor: page.next.map(DeviceListCursor.encode))
                .jsonValue)
    }

    // MARK: Helpers

    private func registrationEntry(_ device: DeviceRecord) -> JSONValue {
        RegistrationResponse(
            keyID: device.kid, user: device.user, name: device.name,
            status: service.visibleStatus(device)
        ).jsonValue
    }

    /// A device as the device list shows it (PROTOCOL.md section 4, "Device list").
    private func deviceEntry(_ device: DeviceRecord) -> Device {
        Device(
            keyID: device.kid, name: device.name, status: service.visibleStatus(device),
            createdAt: RFC3339.string(fromSeconds: device.createdAt),
            lastLoginAt: device.lastLoginAt.map(RFC3339.string(fromSeconds:)), registeredFrom: device.registeredFrom)
    }

    private func requireContentType(_ request: HTTPRequest, _ expected: String) throws(ServiceError) {
        let mediaType = request.headers["Content-Type"]?.split(separator: ";", maxSplits: 1).first
            .map { $0.trimmingWhitespace().lowercased() }
        guard mediaType == expected else {
            throw ServiceError(.invalidRequest, "the Content-Type must be \(expected)")
        }
    }

    private func bearerToken(_ request: HTTPRequest) throws(ServiceError) -> String {
        guard let header = request.headers["Authorization"] else {
            throw ServiceError(.invalidToken, "a Bearer access token is required")
        }
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw ServiceError(.invalidToken, "a Bearer access token is required")
        }
        let token = parts[1].trimmingWhitespace()
        guard !token.isEmpty else { throw ServiceError(.invalidToken, "a Bearer access token is required") }
        return token
    }

    /// The address the rate limit counts: the peer, or behind a trusted proxy the last
    /// `X-Forwarded-For` hop (the one the proxy itself added; earlier hops are client-chosen).
    func clientAddress(of request: HTTPRequest) -> String {
        guard trustProxy, let header = request.headers.values(for: "X-Forwarded-For").last,
            let last = header.split(separator: ",").last?.trimmingWhitespace(), RateLimitKey(parsing: last) != nil
        else { return request.clientAddress }
        return last
    }

    /// Methods outside the known set share one label, so clients cannot grow the metrics.
    private static func methodLabel(_ method: String) -> String {
        ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"].contains(method) ? method : "OTHER"
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
