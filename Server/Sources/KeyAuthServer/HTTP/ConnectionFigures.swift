/// What the connection registry did, counted since the listener started, for `/metrics`: the
/// connections closed as they arrived and those shut down, each by reason, and those open.
///
/// A flood of connections otherwise shows only as logins that wait; these say which defence is
/// at work (``ConnectionShares``, ``RequestDeadlines``).
package struct ConnectionFigures: Sendable, Equatable {
    /// Connections open, those being closed included.
    package var open = 0
    /// Closed as they arrived because their address held its limit or, under pressure, its fair
    /// share. libmicrohttpd closes an IPv4 address's connections past the per-address limit
    /// itself, before the count sees them.
    package var refusedOverShare = 0
    /// Closed as they arrived at the limit, when no open connection could give its slot up.
    package var refusedForNoRoom = 0
    /// Shut down because they had not delivered a whole request within the request timeout.
    package var shutDownPastDeadline = 0
    /// Shut down under pressure: idle for 2 s while their address held more than its share.
    package var shutDownOverShare = 0
    /// Shut down at the limit to make room for a newcomer within its share.
    package var shutDownToMakeRoom = 0
    /// Shut down because their client had not taken a response within the request timeout.
    package var shutDownResponseUntaken = 0
}
