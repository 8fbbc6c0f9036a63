extension Duration {
    /// The duration in seconds, with its fraction: what `TimeInterval` arithmetic and a deadline
    /// written in seconds take.
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// Whole milliseconds, rounded up, as `poll(2)` takes them: a wait rounded down would wake
    /// before its deadline and poll again with nothing left. From 0 to `Int32.max`: `poll` waits
    /// forever for a negative timeout, which no deadline means.
    package var millisecondsRoundedUp: Int32 {
        guard self > .zero else { return 0 }
        // Int32.max milliseconds is under 25 days: clamping the seconds first keeps the
        // arithmetic below from overflowing.
        let seconds = min(components.seconds, 3_000_000)
        let attoseconds = components.attoseconds
        let partial = attoseconds / 1_000_000_000_000_000 + (attoseconds % 1_000_000_000_000_000 > 0 ? 1 : 0)
        return Int32(clamping: seconds * 1000 + partial)
    }
}
