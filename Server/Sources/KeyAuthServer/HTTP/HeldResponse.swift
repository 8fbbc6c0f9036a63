internal import CKeyAuthMicroHTTPD
import Synchronization

/// A response that waits with its connection suspended: until what it depends on is durable, or
/// until a deferred answer (a long poll's) comes.
///
/// The worker thread that built the response suspends the connection and goes on serving other
/// connections. When the answer is known (``DurabilityScope/whenDurable(_:)`` on the group
/// commit's queue, ``DeferredResponse/complete(with:)`` on the long polls' queue) or the server
/// stops, ``resume(with:)`` resumes the connection; libmicrohttpd then calls the access handler
/// again on the connection's worker thread, which queues ``takeResponse()``. Only resuming
/// crosses threads: libmicrohttpd allows `MHD_resume_connection` from any thread, and
/// everything else happens on the worker.
///
/// `@unchecked Sendable`: the connection pointer is only passed to `MHD_resume_connection`,
/// once, under the state's lock; the rest is immutable or behind the lock.
final class HeldResponse: @unchecked Sendable {
    private enum State {
        case waiting
        case resumed(HTTPResponse)
        case taken
    }

    /// The connection, suspended while the state is `waiting`. libmicrohttpd keeps a suspended
    /// connection alive, and the pointer is not used once resumed.
    private let connection: OpaquePointer
    private let state = Mutex(State.waiting)
    /// Whether it waits for a deferred answer (a long poll), which a stop answers at once, rather
    /// than for the disk, which a stop lets finish first.
    let waitsForAnswer: Bool
    /// The request's path, for the answer a stop gives it (``HTTPResponder/failure(_:at:)``).
    let path: String

    init(connection: OpaquePointer, waitsForAnswer: Bool, path: String) {
        self.connection = connection
        self.waitsForAnswer = waitsForAnswer
        self.path = path
    }

    /// Resumes the connection with `response` as its answer, unless it was resumed already.
    /// Returns whether this call resumed it.
    ///
    /// libmicrohttpd is told under the lock: a stop's ``HeldResponses/releaseAll(failure:)``,
    /// finding the response already resumed, must not go on to `MHD_stop_daemon` while the
    /// connection is still suspended, which aborts the process (or resumes it after it was freed).
    /// `MHD_resume_connection` only flags the connection and wakes its worker; nothing it does
    /// waits for this lock.
    @discardableResult
    func resume(with response: HTTPResponse) -> Bool {
        state.withLock { state in
            guard case .waiting = state else { return false }
            state = .resumed(response)
            MHD_resume_connection(connection)
            return true
        }
    }

    /// The response to queue now that the connection is resumed: the one it was resumed with,
    /// or a 503 when called before (which the access handler never does).
    func takeResponse() -> HTTPResponse {
        state.withLock { state in
            defer { state = .taken }
            guard case .resumed(let response) = state else {
                return HTTPResponse(error: StorageError(.unavailable, "a held response was taken before it resumed"))
            }
            return response
        }
    }
}

/// The responses of one daemon that wait with their connections suspended, so that stopping can
/// resume every one of them: libmicrohttpd must not be stopped while a connection is suspended.
final class HeldResponses: Sendable {
    private struct State {
        var held: [ObjectIdentifier: HeldResponse] = [:]
        var isReleasing = false
        /// Set by ``releaseWaits(failure:)``: from then on a long poll is not held either.
        var isReleasingWaits = false
    }

    private let state = Mutex(State())

    /// Suspends `connection` and registers `held`, unless the daemon is stopping: past the drain,
    /// or, for a response that waits for a deferred answer (a long poll), from the stop's start
    /// (then nothing happens and the result is false).
    ///
    /// Call it from the access handler of `connection`, the one place libmicrohttpd allows a
    /// suspension. The registration happens after the suspension, under the same lock as
    /// ``releaseAll(failure:)``, so that no connection is resumed before it was suspended and
    /// none is left suspended by a stop.
    func suspend(_ connection: OpaquePointer, holding held: HeldResponse) -> Bool {
        state.withLock { state in
            guard !state.isReleasing, !(held.waitsForAnswer && state.isReleasingWaits) else { return false }
            MHD_suspend_connection(connection)
            state.held[ObjectIdentifier(held)] = held
            return true
        }
    }

    /// Forgets `held`, which has resumed its connection.
    func resumed(_ held: HeldResponse) {
        _ = state.withLock { $0.held.removeValue(forKey: ObjectIdentifier(held)) }
    }

    /// Responses currently held.
    var count: Int {
        state.withLock { $0.held.count }
    }

    /// Resumes every held connection, whose response becomes `answer`'s for `failure` and the
    /// request's path (a 503), and refuses to hold any more: the last step before the daemon
    /// stops. Returns how many it resumed.
    @discardableResult
    func releaseAll(failure: StorageError, answer: Answer) -> Int {
        let all = state.withLock { state in
            state.isReleasing = true
            defer { state.held = [:] }
            return Array(state.held.values)
        }
        return resume(all, failure: failure, answer: answer)
    }

    /// Resumes the connections that wait for a deferred answer (long polls) with a 503 at once,
    /// and refuses to hold any more of them: the first step of a stop, so that the drain does not
    /// wait out their deadlines. Responses waiting for the disk stay held. Returns how many it
    /// resumed.
    @discardableResult
    func releaseWaits(failure: StorageError, answer: Answer) -> Int {
        let waits = state.withLock { state in
            state.isReleasingWaits = true
            let waits = state.held.filter { $0.value.waitsForAnswer }
            for key in waits.keys { state.held[key] = nil }
            return Array(waits.values)
        }
        return resume(waits, failure: failure, answer: answer)
    }

    /// The answer to a held request for a path that a stop fails.
    typealias Answer = (StorageError, String) -> HTTPResponse

    private func resume(_ all: [HeldResponse], failure: StorageError, answer: Answer) -> Int {
        all.filter { $0.resume(with: answer(failure, $0.path)) }.count
    }
}
