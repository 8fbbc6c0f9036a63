import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A detached thread made with `pthread_create`, whose failure the caller is told of.
///
/// Foundation's `Thread.start()` and `Thread.detachNewThread` on Linux drop the result of
/// `pthread_create`: at the process's thread limit, or without memory for a stack, the work never
/// runs and nothing says so. Whoever waits for it then waits forever (a continuation never
/// resumed), and what it owned (an accepted connection) is never closed. Here the caller learns of
/// the failure and can do the work another way or refuse it.
package enum DetachedThread {
    /// Starts `work` on a new detached thread named `name` (see ``ThreadName``).
    ///
    /// - Parameter stackBytes: the new thread's stack size; nil for the system's default (the
    ///   stack limit, 8 MiB on Debian). Tests pass one no system can give, to reach the failure.
    /// - Returns: false when no thread could be made; `work` has not run and never will.
    package static func start(name: String, stackBytes: Int? = nil, _ work: @escaping @Sendable () -> Void) -> Bool {
        var attributes = pthread_attr_t()
        guard pthread_attr_init(&attributes) == 0 else { return false }
        defer { pthread_attr_destroy(&attributes) }
        guard pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED)) == 0 else { return false }
        if let stackBytes, pthread_attr_setstacksize(&attributes, stackBytes) != 0 { return false }
        // The new thread takes over this reference; it stays here when no thread is made.
        let body = Unmanaged.passRetained(ThreadBody(name: name, work: work))
        var thread = pthread_t()
        let result = pthread_create(&thread, &attributes, runThreadBody, body.toOpaque())
        guard result == 0 else {
            body.release()
            return false
        }
        return true
    }

    /// Runs `work` on a new detached thread, or on the caller's thread when none can be made
    /// (the process at its thread limit): holding the caller's thread for as long as `work`
    /// takes beats never running it, for work that someone waits for.
    package static func startOrRunHere(name: String, stackBytes: Int? = nil, _ work: @escaping @Sendable () -> Void) {
        if !start(name: name, stackBytes: stackBytes, work) { work() }
    }
}

/// What a ``DetachedThread`` runs, passed to it through `pthread_create`'s one pointer.
private final class ThreadBody: Sendable {
    let name: String
    let work: @Sendable () -> Void

    init(name: String, work: @escaping @Sendable () -> Void) {
        self.name = name
        self.work = work
    }
}

/// The new thread's entry: takes the reference ``DetachedThread/start(name:stackBytes:_:)`` made.
private func runThreadBody(_ context: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    guard let context else { return nil }
    let body = Unmanaged<ThreadBody>.fromOpaque(context).takeRetainedValue()
    ThreadName.setCurrent(body.name)
    body.work()
    return nil
}
