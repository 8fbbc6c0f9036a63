import Glibc

/// The open-file limit (`RLIMIT_NOFILE`) that serving needs, set at the start of `serve`: every
/// connection is a descriptor, and running out of descriptors ends the process.
///
/// A shell or a systemd service starts with a soft limit of 1024, and the server holds some 30
/// descriptors of its own (SQLite's files, the log, epoll, timers), so 1000 connections did not
/// fit: a flood from 40 addresses took every descriptor, and libdispatch, which opens
/// `/proc/TID/stat` each second to watch its worker threads and takes a failure for a dead thread,
/// stopped the process (`Illegal instruction`) within seconds (Benchmarks/flood). systemd keeps
/// the soft limit at 1024 for programs that still use `select(2)` and leaves a program that needs
/// more to raise it up to the hard limit (524288 there) itself; the server uses epoll, so it does.
struct DescriptorBudget {
    /// Descriptors kept beside the connections: 256.
    ///
    /// Some 30 are open at rest with SQLite and two worker threads; each worker thread adds an
    /// epoll and a wake-up descriptor (32 threads with PostgreSQL), PostgreSQL its pool's
    /// connections, and libdispatch, SQLite and a backup open files for a moment; and each
    /// listener may hold up to 32 connections beyond its limit while it makes room for newcomers
    /// (``ConnectionShares/evictionHeadroom``). A margin rather than a count, because running
    /// short is fatal and a spare descriptor costs nothing.
    static let reserve = 256

    /// The descriptors kept beside the connections for `threads` worker threads (`--threads`):
    /// ``reserve``, which counts 32, and 3 for each one beyond (its epoll and wake-up descriptors,
    /// and a PostgreSQL pool connection). `--threads 256` with the default 1000 connections needed
    /// some 1,650 descriptors against the 1,320 the limit was raised to.
    static func reserve(threads: Int) -> Int {
        reserve + 3 * max(0, threads - 32)
    }

    /// What the start does about the limit.
    enum Plan: Equatable {
        /// The soft limit already covers the connections and the reserve.
        case enough
        /// Raise the soft limit from `from` to `to`, the connections and the reserve.
        case raise(from: Int, to: Int)
        /// The hard limit is short: raise the soft limit to it (`to`) and accept at most
        /// `connections` connections instead of `--max-connections`, so that the descriptors
        /// never run out.
        case shrink(from: Int, to: Int, connections: Int)
        /// Not even one connection fits beside the reserve.
        case refuse(hard: Int)
    }

    /// The plan for a process whose limit is `soft` (hard: `hard`) serving `connections` on the
    /// public listener and `metricsConnections` on the metrics listener with `threads` workers.
    static func plan(soft: Int, hard: Int, connections: Int, metricsConnections: Int, threads: Int = 2) -> Plan {
        let kept = reserve(threads: threads)
        let needed = connections + metricsConnections + kept
        if soft >= needed { return .enough }
        if hard >= needed { return .raise(from: soft, to: needed) }
        let fitting = hard - metricsConnections - kept
        guard fitting >= 1 else { return .refuse(hard: hard) }
        return .shrink(from: soft, to: hard, connections: fitting)
    }

    /// Reads this process's limit and applies ``plan(soft:hard:connections:metricsConnections:threads:)``
    /// to it; returns the plan carried out (a soft limit that cannot be raised after all is
    /// planned for as the hard one).
    static func apply(connections: Int, metricsConnections: Int, threads: Int) -> Plan {
        var limit = rlimit()
        guard getrlimit(Self.resource, &limit) == 0 else { return .enough }
        let soft = Int(clamping: limit.rlim_cur)
        let hard = Int(clamping: limit.rlim_max)
        let planned = plan(
            soft: soft, hard: hard, connections: connections, metricsConnections: metricsConnections, threads: threads)
        let target: Int
        switch planned {
        case .enough, .refuse: return planned
        case .raise(_, let to), .shrink(_, let to, _): target = to
        }
        limit.rlim_cur = rlim_t(target)
        guard setrlimit(Self.resource, &limit) == 0 else {
            return plan(
                soft: soft, hard: soft, connections: connections, metricsConnections: metricsConnections,
                threads: threads)
        }
        return planned
    }

    /// The line `serve` writes about `plan` (with the level it has), or nil when there is
    /// nothing to say.
    static func message(for plan: Plan, connections: Int, metricsConnections: Int, threads: Int = 2) -> (
        text: String, level: String
    )? {
        let metrics = metricsConnections > 0 ? ", \(metricsConnections) for metrics" : ""
        let reserve = reserve(threads: threads)
        switch plan {
        case .enough:
            return nil
        case .raise(let from, let to):
            return (
                "raised the open-file limit (RLIMIT_NOFILE) from \(from) to \(to): \(connections) connections"
                    + "\(metrics) and \(reserve) for the server's own files", "info"
            )
        case .shrink(let from, let to, let fitting):
            let needed = connections + metricsConnections + reserve
            return (
                "warning: the open-file limit (RLIMIT_NOFILE) is \(from), at most \(to): serving at most \(fitting) "
                    + "connections instead of --max-connections \(connections); raise the hard limit to \(needed) "
                    + "(LimitNOFILE= in the systemd unit, ulimit -Hn) or lower --max-connections", "warning"
            )
        case .refuse(let hard):
            return (
                "cannot start: the open-file limit (RLIMIT_NOFILE) is at most \(hard), and serving needs \(reserve) "
                    + "for the server's own files\(metrics) and one per connection; raise it to "
                    + "\(reserve + metricsConnections + connections) (LimitNOFILE= in the systemd unit, ulimit -n)",
                "error"
            )
        }
    }

    private static var resource: __rlimit_resource_t { __rlimit_resource_t(RLIMIT_NOFILE.rawValue) }
}
