import KeyAuth

/// The per-address budgets of the endpoints that anyone can call without a token, logins,
/// registrations and client applications' requests (PROTOCOL.md section 6): failures count
/// against one budget, and every registration attempt against a second.
struct AttemptLimits: Sendable {
    /// Failed logins and registrations per address.
    let failures: AddressRateLimiter
    /// Registration attempts per address, successful or not.
    let registrations: AddressRateLimiter

    /// Runs a login or registration from `address` under the limits, counting failures (client
    /// errors other than `authorization_pending`, which polling clients get by design) and
    /// handing each outcome to `record` for the metrics.
    ///
    /// - Parameters:
    ///   - countsEveryAttempt: whether the attempt also counts against the registration budget
    ///     (each valid registration stores a device, pending ones included, so even valid ones
    ///     must not come in floods).
    ///   - counts: whether an error of `body` counts as a failure; by default every one but
    ///     `authorization_pending`.
    ///   - record: receives `slow_down`, the body's result, or the OAuth code of its error.
    ///   - body: the endpoint; returns its response and the result to record.
    /// - Throws: ``ServiceError`` `.slowDown` when a budget is spent; `body`'s errors.
    func run(
        from address: RateLimitKey, countsEveryAttempt: Bool,
        counts: (ServiceError.Kind) -> Bool = { $0 != .authorizationPending }, record: (String) -> Void,
        _ body: () throws -> (HTTPResponse, String)
    ) throws -> HTTPResponse {
        if let retryAfter = failures.retryAfter(for: address) {
            record(OAuthError.Code.slowDown.rawValue)
            throw ServiceError(.slowDown(retryAfter: retryAfter), "too many failed attempts; retry later")
        }
        if countsEveryAttempt {
            if let retryAfter = registrations.retryAfter(for: address) {
                record(OAuthError.Code.slowDown.rawValue)
                throw ServiceError(
                    .slowDown(retryAfter: retryAfter), "too many registrations from this address; retry later")
            }
            registrations.record(address)
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

    /// Forgets counters whose events left the window.
    func purge() {
        failures.purge()
        registrations.purge()
    }
}
