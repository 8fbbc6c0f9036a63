import KeyAuth

/// The per-address budgets of the endpoints that anyone can call without a token, logins,
/// registrations, client applications' requests and browsers' sign-ins (PROTOCOL.md section
/// 6): failures count against one budget, and every attempt that stores something for anyone
/// who asks (a registration, an anonymous sign-in's request and session) against its own.
struct AttemptLimits: Sendable {
    /// Which every-attempt budget an endpoint spends.
    enum Budget: Sendable {
        /// `POST /v1/devices`.
        case registrations
        /// The account page's and `/authorize`'s sign-in: each stores a request that reaches the
        /// user's devices, so an address gets only so many, whatever the outcome.
        case signInStarts
        /// `GET /v1/ssh/krl` and `GET /v1/ssh/ca`: anyone may fetch them, hosts on a timer of
        /// minutes, so an address fetching more than twice a second is no host.
        case sshFetches
        /// `POST /v1/ssh/certificates`, counted per device, not per address: each costs a CA
        /// signature and an audit event kept for good, and an agent renews one every few minutes
        /// at most.
        case sshCertificates
        /// Authorization codes per user (`/authorize` answered from a signed-in session, keyed
        /// ``RateLimitKey/other(_:)`` by the user's name): each stores a code and an audit event
        /// kept for good, and a script in the user's own session could otherwise ask without end.
        case authorizationCodes
    }

    /// Fetches of the SSH CA's public documents per address and window.
    static let sshFetchesPerWindow = 120
    /// SSH certificates per device and window.
    static let sshCertificatesPerWindow = 10
    /// Authorization codes per user and window: a person signs in to a few applications a
    /// minute, not dozens.
    static let authorizationCodesPerWindow = 30

    /// Failed logins and registrations per address.
    let failures: AddressRateLimiter
    /// Registration attempts per address, successful or not.
    let registrations: AddressRateLimiter
    /// Anonymous sign-in starts per address, successful or not.
    let signInStarts: AddressRateLimiter
    /// Fetches of the SSH CA's key and revocation list per address.
    let sshFetches: AddressRateLimiter
    /// SSH certificates issued per device (keyed ``RateLimitKey/other(_:)`` by its `kid`).
    let sshCertificates: AddressRateLimiter
    /// Authorization codes issued per user.
    let authorizationCodes: AddressRateLimiter

    /// Runs a login or registration from `address` under the limits, counting failures (client
    /// errors other than `authorization_pending`, which polling clients get by design, and a
    /// busy server's refusal, which is not the client's doing) and
    /// handing each outcome to `record` for the metrics.
    ///
    /// - Parameters:
    ///   - everyAttempt: the budget every attempt also counts against, if any (each valid
    ///     registration stores a device, pending ones included, and each sign-in start a request,
    ///     so even valid ones must not come in floods).
    ///   - counts: whether an error of `body` counts as a failure; by default every one but
    ///     `authorization_pending` and ``ServiceError/Kind/busy(retryAfter:)``.
    ///   - record: receives `slow_down`, the body's result, or the OAuth code of its error.
    ///   - body: the endpoint; returns its response and the result to record.
    /// - Throws: ``ServiceError`` `.slowDown` when a budget is spent; `body`'s errors.
    func run(
        from address: RateLimitKey, everyAttempt: Budget?,
        counts: (ServiceError.Kind) -> Bool = AttemptLimits.countsAsFailure, record: (String) -> Void,
        _ body: () throws -> (HTTPResponse, String)
    ) throws -> HTTPResponse {
        if let retryAfter = failures.retryAfter(for: address) {
            record(OAuthError.Code.slowDown.rawValue)
            throw ServiceError(.slowDown(retryAfter: retryAfter), "too many failed attempts; retry later")
        }
        if let everyAttempt {
            do {
                try count(address, against: everyAttempt)
            } catch {
                record(OAuthError.Code.slowDown.rawValue)
                throw error
            }
        }
        do {
            let (response, result) = try body()
            record(result)
            return response
        } catch let error as ServiceError {
            record(error.kind.statusAndCode.code.rawValue)
            if counts(error.kind) { failures.record(address) }
            throw error
        } catch let error as StorageError {
            record(OAuthError.Code.temporarilyUnavailable.rawValue)
            throw error
        } catch {
            record(OAuthError.Code.serverError.rawValue)
            throw error
        }
    }

    /// Whether an error of a login or registration counts against the address's failures.
    static func countsAsFailure(_ kind: ServiceError.Kind) -> Bool {
        switch kind {
        case .authorizationPending, .busy: false
        default: true
        }
    }

    /// Counts one attempt of `address` against `budget`, unless the budget is spent.
    ///
    /// - Throws: ``ServiceError`` `.slowDown` with the seconds until the address may try again;
    ///   the refused attempt is not counted, so refusals do not extend the wait.
    func count(_ address: RateLimitKey, against budget: Budget) throws(ServiceError) {
        let (limiter, what) =
            switch budget {
            case .registrations: (registrations, "registrations from this address")
            case .signInStarts: (signInStarts, "sign-in requests from this address")
            case .sshFetches: (sshFetches, "fetches from this address")
            case .sshCertificates: (sshCertificates, "SSH certificates for this device")
            case .authorizationCodes: (authorizationCodes, "sign-ins to applications for this user")
            }
        if let retryAfter = limiter.admit(address) {
            throw ServiceError(.slowDown(retryAfter: retryAfter), "too many \(what); retry later")
        }
    }

    /// Forgets counters whose events left the window.
    func purge() {
        failures.purge()
        registrations.purge()
        signInStarts.purge()
        sshFetches.purge()
        sshCertificates.purge()
        authorizationCodes.purge()
    }
}
