import Foundation

/// The library's one source of time: JWT times, PIN delays and token expiry all read it.
///
/// Injected wherever time matters, so that tests use fixed vectors and move time by hand instead
/// of sleeping; production code takes ``system``.
public struct KeyAuthClock: Sendable {
    private let read: @Sendable () -> Date

    /// A clock that answers whatever `now` returns, for tests that move time themselves.
    public init(_ now: @escaping @Sendable () -> Date) {
        read = now
    }

    /// The current time.
    public var now: Date { read() }

    /// The current time in whole seconds since 1970, rounded down: the unit of JWT claims.
    public var seconds: Int64 { Int64(clampingSeconds: read().timeIntervalSince1970) }

    /// The system's wall clock.
    public static let system = KeyAuthClock { Date() }

    /// A clock that always answers `date`.
    public static func fixed(_ date: Date) -> KeyAuthClock {
        KeyAuthClock { date }
    }

    /// A clock that always answers `seconds` since 1970.
    public static func fixed(seconds: Int64) -> KeyAuthClock {
        fixed(Date(timeIntervalSince1970: TimeInterval(seconds)))
    }

    /// A clock that answers `seconds()` since 1970, for a test clock kept as a counter.
    public static func seconds(_ seconds: @escaping @Sendable () -> Int64) -> KeyAuthClock {
        KeyAuthClock { Date(timeIntervalSince1970: TimeInterval(seconds())) }
    }
}
