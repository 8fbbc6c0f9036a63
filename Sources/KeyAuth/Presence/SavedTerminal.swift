import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The terminal settings of the prompt that is waiting, where a signal handler can reach them
/// without allocating or locking: a buffer allocated once and never freed, and an atomic that
/// says whose they are.
///
/// One slot is enough: there is one terminal and one prompt on it at a time. A second prompt
/// that finds the slot taken restores its terminal itself and is simply not covered by a signal.
enum SavedTerminal {
    /// The descriptor whose settings are saved; `free` when none, `filling` while being saved.
    static let owner = Atomic<Int32>(free)
    /// Written only by the prompt that moved `owner` to `filling`, before it publishes its
    /// descriptor with release ordering; read only by whoever then takes the descriptor.
    nonisolated(unsafe) static let settings: UnsafeMutablePointer<termios> = {
        let buffer = UnsafeMutablePointer<termios>.allocate(capacity: 1)
        buffer.initialize(to: termios())
        return buffer
    }()
    static let free: Int32 = -1
    static let filling: Int32 = -2

    /// Touches both globals, so that their one-time setup has run before any signal handler.
    static func prepare() {
        _ = settings
        _ = owner.load(ordering: .relaxed)
    }

    /// Saves `settings` for `descriptor` if the slot is free.
    static func save(_ descriptor: Int32, _ original: termios) -> Bool {
        // Touch the buffer first, so that its one-time setup never runs inside a signal handler.
        let buffer = settings
        guard owner.compareExchange(expected: free, desired: filling, ordering: .acquiring).exchanged else {
            return false
        }
        buffer.pointee = original
        owner.store(descriptor, ordering: .releasing)
        return true
    }

    /// Takes the slot back after the prompt; false when a signal handler took it first.
    static func release(_ descriptor: Int32) -> Bool {
        owner.compareExchange(expected: descriptor, desired: free, ordering: .acquiringAndReleasing).exchanged
    }

    /// Restores the saved settings and ends the line; false when no prompt was waiting.
    static func restore() -> Bool {
        let descriptor = owner.exchange(free, ordering: .acquiring)
        guard descriptor >= 0 else { return false }
        _ = tcsetattr(descriptor, TCSAFLUSH, settings)
        var newline = UInt8(ascii: "\n")
        _ = write(descriptor, &newline, 1)
        return true
    }
}
