import Synchronization

/// Counters and a latency histogram in Prometheus text format (version 0.0.4) for `/metrics`.
///
/// Labels are bounded: routes are patterns (`/v1/devices/{kid}`), never raw paths, and results
/// are a fixed vocabulary, so a client cannot grow the series without limit.
final class ServerMetrics: Sendable {
    /// Upper bounds of the latency buckets, in seconds.
    static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

    private struct RequestKey: Hashable {
        let route: String
        let method: String
        let status: Int
    }

    private struct Histogram {
        var buckets = [UInt64](repeating: 0, count: ServerMetrics.latencyBuckets.count)
        var count: UInt64 = 0
        var sum: Double = 0

        /// Counts one observation in every bucket whose bound it does not exceed (the buckets
        /// are cumulative, as Prometheus reads them).
        mutating func record(_ seconds: Double) {
            for (index, bound) in ServerMetrics.latencyBuckets.enumerated() where seconds <= bound {
                buckets[index] += 1
            }
            count += 1
            sum += seconds
        }
    }

    private struct State {
        var requests: [RequestKey: UInt64] = [:]
        var latency: [String: Histogram] = [:]
        var logins: [String: UInt64] = [:]
        var registrations: [String: UInt64] = [:]
        var signInRequests: [String: UInt64] = [:]
        var policyRefusals: [String: UInt64] = [:]
    }

    private let state = Mutex(State())
    /// Reads the public listener's connection figures, once it exists (``observeConnections(_:)``).
    private let connections = Mutex<(@Sendable () -> ConnectionFigures)?>(nil)

    /// Has `/metrics` include the connection figures `figures` reads (the public listener's).
    func observeConnections(_ figures: @escaping @Sendable () -> ConnectionFigures) {
        connections.withLock { $0 = figures }
    }

    /// Counts one answered request and its duration.
    func recordRequest(route: String, method: String, status: Int, seconds: Double) {
        state.withLock { state in
            state.requests[RequestKey(route: route, method: method, status: status), default: 0] += 1
            // Changed in place: a copy taken out and stored back would copy the buckets, under
            // the lock, on every request.
            state.latency[route, default: Histogram()].record(seconds)
        }
    }

    /// Counts one login attempt by result (`success`, or an OAuth error code).
    func recordLogin(result: String) {
        state.withLock { $0.logins[result, default: 0] += 1 }
    }

    /// Counts one registration attempt by result (`active`, `pending`, `existing`, or an error).
    func recordRegistration(result: String) {
        state.withLock { $0.registrations[result, default: 0] += 1 }
    }

    /// Counts one event of a sign-in request by result: `created`, `approved`, `denied`,
    /// `issued`, `session` (an account page sign-in), or the OAuth code of a refusal.
    func recordSignInRequest(result: String) {
        state.withLock { $0.signInRequests[result, default: 0] += 1 }
    }

    /// Counts one device below the device policy, by where (`registration`, `login`) and mode
    /// (`monitor`: let through, `enforce`: refused).
    func recordPolicyRefusal(at event: String, mode: String) {
        state.withLock { $0.policyRefusals["at=\"\(event)\",mode=\"\(mode)\"", default: 0] += 1 }
    }

    /// The exposition text.
    func render() -> String {
        let snapshot = state.withLock { $0 }
        var lines: [String] = []
        lines.append("# HELP keyauth_http_requests_total HTTP requests answered, by route, method and status.")
        lines.append("# TYPE keyauth_http_requests_total counter")
        for (key, count) in snapshot.requests.sorted(by: {
            ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status)
        }) {
            lines.append(
                "keyauth_http_requests_total{route=\"\(key.route)\",method=\"\(key.method)\",status=\"\(key.status)\"} \(count)"
            )
        }
        lines.append("# HELP keyauth_logins_total Login attempts at /oauth/token, by result.")
        lines.append("# TYPE keyauth_logins_total counter")
        for (result, count) in snapshot.logins.sorted(by: { $0.key < $1.key }) {
            lines.append("keyauth_logins_total{result=\"\(result)\"} \(count)")
        }
        lines.append("# HELP keyauth_registrations_total Device registrations, by result.")
        lines.append("# TYPE keyauth_registrations_total counter")
        for (result, count) in snapshot.registrations.sorted(by: { $0.key < $1.key }) {
            lines.append("keyauth_registrations_total{result=\"\(result)\"} \(count)")
        }
        lines.append("# HELP keyauth_sign_in_requests_total Sign-in requests and their answers, by result.")
        lines.append("# TYPE keyauth_sign_in_requests_total counter")
        for (result, count) in snapshot.signInRequests.sorted(by: { $0.key < $1.key }) {
            lines.append("keyauth_sign_in_requests_total{result=\"\(result)\"} \(count)")
        }
        lines.append(
            "# HELP keyauth_device_policy_refusals_total Devices below --device-policy, by event and mode "
                + "(monitor: let through).")
        lines.append("# TYPE keyauth_device_policy_refusals_total counter")
        for (labels, count) in snapshot.policyRefusals.sorted(by: { $0.key < $1.key }) {
            lines.append("keyauth_device_policy_refusals_total{\(labels)} \(count)")
        }
        lines.append("# HELP keyauth_http_request_duration_seconds Time to answer a request, by route.")
        lines.append("# TYPE keyauth_http_request_duration_seconds histogram")
        for (route, histogram) in snapshot.latency.sorted(by: { $0.key < $1.key }) {
            for (index, bound) in Self.latencyBuckets.enumerated() {
                lines.append(
                    "keyauth_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"\(bound)\"} \(histogram.buckets[index])"
                )
            }
            lines.append(
                "keyauth_http_request_duration_seconds_bucket{route=\"\(route)\",le=\"+Inf\"} \(histogram.count)")
            lines.append("keyauth_http_request_duration_seconds_sum{route=\"\(route)\"} \(histogram.sum)")
            lines.append("keyauth_http_request_duration_seconds_count{route=\"\(route)\"} \(histogram.count)")
        }
        if let figures = connections.withLock({ $0 })?() {
            lines += Self.connectionLines(figures)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The exposition lines of the connection figures.
    private static func connectionLines(_ figures: ConnectionFigures) -> [String] {
        [
            "# HELP keyauth_connections_open Connections open on the public listener.",
            "# TYPE keyauth_connections_open gauge",
            "keyauth_connections_open \(figures.open)",
            "# HELP keyauth_connections_refused_total Connections closed as they arrived, by reason.",
            "# TYPE keyauth_connections_refused_total counter",
            "keyauth_connections_refused_total{reason=\"share\"} \(figures.refusedOverShare)",
            "keyauth_connections_refused_total{reason=\"no_room\"} \(figures.refusedForNoRoom)",
            "# HELP keyauth_connections_shut_down_total Open connections the server shut down, by reason.",
            "# TYPE keyauth_connections_shut_down_total counter",
            "keyauth_connections_shut_down_total{reason=\"request_deadline\"} \(figures.shutDownPastDeadline)",
            "keyauth_connections_shut_down_total{reason=\"share\"} \(figures.shutDownOverShare)",
            "keyauth_connections_shut_down_total{reason=\"response_deadline\"} \(figures.shutDownResponseUntaken)",
            "keyauth_connections_shut_down_total{reason=\"make_room\"} \(figures.shutDownToMakeRoom)",
        ]
    }
}
