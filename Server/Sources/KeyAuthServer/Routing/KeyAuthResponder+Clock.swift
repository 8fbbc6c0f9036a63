import Dispatch

// The clock's part in answering: an instance on PostgreSQL compares its clock with the
// database's (``ClockSkewMonitor``) and refuses what it would judge by a clock known to be off.
extension KeyAuthResponder {
    /// Compares the clock with the database's (PostgreSQL) and logs what changed: at every
    /// cleanup, and at once when a request saw the wall clock set (``ClockSkewMonitor``), when
    /// the outcome is logged either way, since requests were refused meanwhile.
    func checkClock(afterStep: Bool) {
        do {
            let change = try service.checkClock()
            if let change {
                switch change.level {
                case .error: log.error(change.line, format: logFormat)
                case .warning: log.warning(change.line, format: logFormat)
                case .notice: log.notice(change.line, format: logFormat)
                }
            } else if afterStep, !service.clockSkew.refusesRequests() {
                log.notice(
                    "the clock agrees with the database's after it was set: this instance answers again",
                    format: logFormat)
            }
        } catch {
            let when = afterStep ? "after the wall clock was set" : "cleanup"
            log.error("\(when): the database's clock could not be read: \(error)", format: logFormat)
        }
    }

    /// Has a step of the wall clock, which the first request after it sees, logged and the
    /// clocks compared again at once, off the request's path.
    func watchClockSteps() {
        service.clockSkew.whenStepped { [weak self] moved in
            guard let self else { return }
            // Rounded: the two pairs of readings are microseconds apart, not whole seconds.
            let seconds = moved.addingSaturating(moved < 0 ? -500_000_000 : 500_000_000) / 1_000_000_000
            log.warning(
                "the wall clock was set \(abs(seconds)) s \(seconds > 0 ? "forward" : "back") since it was last "
                    + "compared with the database's: requests get 503 until it is compared again", format: logFormat)
            DispatchQueue.global(qos: .utility).async { [weak self] in self?.checkClock(afterStep: true) }
        }
    }

    /// What a request refused for the clock is told.
    static func clockRefusal(_ monitor: ClockSkewMonitor) -> String {
        if let refusal = monitor.refusal { return refusal + "; this instance answers again once its clock is set" }
        return "this server's clock was set since it was last compared with the database's; "
            + "this instance answers again once it has compared them"
    }

    /// Whether a route answers while the clock is past the leeway: `/healthz`, which says why it
    /// fails, and the discovery documents and JWK set, which depend on no clock.
    static func servedWithClockOff(_ route: RouteTable<Endpoint>.Match) -> Bool {
        guard let label = label(of: route) else { return false }
        return label == "/healthz" || label.hasPrefix("/.well-known/")
    }
}
