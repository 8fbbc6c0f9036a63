import Dispatch
import Synchronization

/// A response that is not known yet when the responder returns: a long poll's answer, which comes
/// when something happens or a deadline passes.
///
/// The responder returns at once with ``HTTPResponse/deferred(_:)``; the transport suspends the
/// connection (so the worker thread goes on serving its other connections) and resumes it when
/// ``complete(with:)`` is called, from whatever thread finds the answer. A callback added after
/// completion runs at once, on the caller's thread, so no ordering of "complete" and "observe"
/// loses the answer.
package final class DeferredResponse: Sendable {
    private struct State {
        var response: HTTPResponse?
        var observers: [@Sendable (HTTPResponse) -> Void] = []
    }

    private let state = Mutex(State())

    /// An answer still to come.
    package init() {}

    /// Sets the answer, once; later calls are ignored. Runs the observers, in the order they were
    /// added, on this thread.
    package func complete(with response: HTTPResponse) {
        let observers: [@Sendable (HTTPResponse) -> Void]? = state.withLock { state in
            guard state.response == nil else { return nil }
            state.response = response
            defer { state.observers = [] }
            return state.observers
        }
        for observer in observers ?? [] { observer(response) }
    }

    /// Runs `observer` with the answer: now when it is known, else when it is.
    package func whenComplete(_ observer: @escaping @Sendable (HTTPResponse) -> Void) {
        let known: HTTPResponse? = state.withLock { state in
            if let response = state.response { return response }
            state.observers.append(observer)
            return nil
        }
        if let known { observer(known) }
    }

    /// The answer, waiting for it up to `seconds`; a 503 when it does not come in time. For
    /// callers without a transport (tests, the fuzz harness), which may block.
    package func wait(seconds: Double) -> HTTPResponse {
        let arrived = DispatchSemaphore(value: 0)
        let answer = Mutex<HTTPResponse?>(nil)
        whenComplete { response in
            answer.withLock { $0 = response }
            arrived.signal()
        }
        let nanoseconds = UInt64(Int(clampingSeconds: seconds * 1e9, to: 0...Int(Int64.max)))
        _ = arrived.wait(timeout: .now() + .nanoseconds(Int(clamping: nanoseconds)))
        return answer.withLock { $0 }
            ?? HTTPResponse(error: StorageError(.unavailable, "the deferred response did not come in time"))
    }
}

extension HTTPResponse {
    /// A response whose answer `deferred` gives later; its own status and body are never sent.
    package static func deferred(_ deferred: DeferredResponse) -> HTTPResponse {
        var response = HTTPResponse(status: 102)
        response.deferred = deferred
        return response
    }

    /// This response, or for a deferred one its answer, waited for up to `seconds`.
    package func settled(seconds: Double = 60) -> HTTPResponse {
        deferred?.wait(seconds: seconds) ?? self
    }
}
