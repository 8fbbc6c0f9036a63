internal import CKeyAuthMicroHTTPD

// libmicrohttpd's callbacks. They are global functions in this library file, not closures in
// `main.swift`: a closure there is main-actor isolated and traps when a worker thread calls it.
// Per-request state is a `RequestState` retained into `*con_cls` on the first call and
// released in the completion callback, which libmicrohttpd always calls exactly once.

/// The state of one request across the access handler's calls.
final class RequestState {
    var request: HTTPRequest
    var bodyTooLarge = false
    var discardedBytes = 0
    /// The response waiting (for durability, or for its deferred answer) while the connection is
    /// suspended; the access handler queues it when libmicrohttpd calls again after the resume.
    var held: HeldResponse?

    init(request: HTTPRequest) {
        self.request = request
    }
}

/// The access handler: called once when the headers are in, once per body chunk, and once when
/// the request is complete (then with `*upload_data_size == 0`), and once more after a
/// suspension (for durability, or for a long poll's answer: ``HeldResponse``) ended.
func httpServerAccessHandler(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
    _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
    _ uploadDataSize: UnsafeMutablePointer<Int>?, _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let uploadDataSize, let requestContext else { return .NO }
    let server = Unmanaged<HTTPServerContext>.fromOpaque(cls).takeUnretainedValue()

    guard let statePointer = requestContext.pointee else {
        // First call: the headers are complete and no body byte has been read yet.
        let tracked = trackedConnection(of: connection)
        // Decoded: a path that is not UTF-8 is kept repaired for the log and refused.
        let validPath = url.flatMap { String(validatingCString: $0) }
        let state = RequestState(
            request: HTTPRequest(
                method: method.map { String(cString: $0) } ?? "",
                path: validPath ?? url.map { String(cString: $0) } ?? "/",
                clientAddress: tracked?.clientAddress ?? clientAddress(of: connection)))
        if tracked?.takeRawPathHoldsNUL() == true {
            state.request.pathFault = "a NUL character (%00)"
        } else if url != nil, validPath == nil {
            state.request.pathFault = "bytes that are not UTF-8"
        }
        withExtendedLifetime(state) {
            let pointer = Unmanaged.passUnretained(state).toOpaque()
            MHD_get_connection_values(connection, .HEADER_KIND, httpServerCollectHeader, pointer)
            MHD_get_connection_values_n(connection, .GET_ARGUMENT_KIND, httpServerCollectQueryItem, pointer)
        }
        requestContext.pointee = Unmanaged.passRetained(state).toOpaque()
        server.inFlight.add(1, ordering: .relaxed)
        // Ambiguous framing, and a declared length over the limit, are refused before reading any
        // of the body; libmicrohttpd then discards the rest and closes the connection after the
        // answer, so no byte of it is read as a next request.
        if let problem = state.request.headers.framingProblem {
            state.request.framingProblem = problem
            // Said, not left to libmicrohttpd's version: a body read by another framing than the
            // sender's must not be read as a next request.
            tracked?.closeAfterResponse()
            return httpServerAnswer(state, server: server, on: connection)
        }
        if let declared = state.request.headers["Content-Length"], let length = Int(declared),
            length > server.maximumBodySize
        {
            state.request.bodyTooLarge = true
            return httpServerAnswer(state, server: server, on: connection)
        }
        return .YES
    }

    let state = Unmanaged<RequestState>.fromOpaque(statePointer).takeUnretainedValue()
    if let held = state.held {
        // Called again after the resume: the response waited long enough.
        state.held = nil
        return httpServerQueue(held.takeResponse(), on: connection, server: server)
    }
    let chunkSize = uploadDataSize.pointee
    if chunkSize > 0 {
        // A body chunk. The limit holds while reading: past it nothing more is kept, and a
        // client that keeps streaming (chunked encoding has no declared length) is cut off.
        if state.bodyTooLarge {
            state.discardedBytes += chunkSize
            if state.discardedBytes > server.maximumDiscardedBytes { return .NO }
        } else if state.request.body.count + chunkSize > server.maximumBodySize {
            state.bodyTooLarge = true
            state.discardedBytes = state.request.body.count + chunkSize
            state.request.body = []
        } else if let uploadData {
            uploadData.withMemoryRebound(to: UInt8.self, capacity: chunkSize) {
                state.request.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: chunkSize))
            }
        }
        uploadDataSize.pointee = 0
        return .YES
    }

    // The request is complete: the time to answer it does not count against its deadline. If the
    // registry shut the connection down just before (its deadline, its address's share, room for
    // a newcomer), the request was still in the socket's buffer; no answer can reach the client,
    // so it is not acted on, and the client, seeing its connection closed, may send it again.
    guard trackedConnection(of: connection)?.requestReceived() != false else { return .NO }
    state.request.bodyTooLarge = state.bodyTooLarge
    return httpServerAnswer(state, server: server, on: connection)
}

/// Answers the request: queues the response at once when it is known and nothing it depends on
/// waits for the disk; else holds it with the connection suspended until the storage reports
/// the outcome (see ``DurabilityScope``) or its deferred answer comes (a long poll), so that no
/// worker thread sits idle through an fsync or a wait.
private func httpServerAnswer(
    _ state: RequestState, server: HTTPServerContext, on connection: OpaquePointer
) -> MHD_Result {
    let (response, durability) = DurabilityScope.run { server.responder.respond(to: state.request) }
    if case .failed(let error) = durability.outcome {
        return httpServerQueue(server.responder.failure(error, at: state.request.path), on: connection, server: server)
    }
    if case .durable = durability.outcome, response.deferred == nil {
        return httpServerQueue(response, on: connection, server: server)
    }
    let held = HeldResponse(
        connection: connection, waitsForAnswer: response.deferred != nil, path: state.request.path)
    guard server.holdResponses.suspend(connection, holding: held) else {
        // Stopping: a long poll cannot wait through a stop, and past the drain nothing can; a
        // response may not go out before its data is durable.
        return httpServerQueue(
            server.responder.failure(
                StorageError(.unavailable, "the server is shutting down"), at: state.request.path),
            on: connection, server: server)
    }
    state.held = held
    let resume: @Sendable (HTTPResponse) -> Void = { answer in
        if held.resume(with: answer) { server.holdResponses.resumed(held) }
    }
    let path = state.request.path
    durability.whenDurable { failure in
        if let failure {
            resume(server.responder.failure(failure, at: path))
        } else if let deferred = response.deferred {
            deferred.whenComplete(resume)
        } else {
            resume(response)
        }
    }
    return .YES
}

/// The completion callback: releases the request's state, whatever ended the request.
func httpServerRequestCompleted(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ requestContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ reason: MHD_RequestTerminationCode
) {
    if let connection {
        trackedConnection(of: connection)?.requestEnded(now: ServerClock.monotonicNanoseconds())
    }
    guard let requestContext, let statePointer = requestContext.pointee else { return }
    Unmanaged<RequestState>.fromOpaque(statePointer).release()
    requestContext.pointee = nil
    if let cls {
        Unmanaged<HTTPServerContext>.fromOpaque(cls).takeUnretainedValue().inFlight.subtract(1, ordering: .releasing)
    }
}

/// The accept policy: while the server runs, a connection is served when its address (an IPv6
/// peer's whole /64) is within its share (``ConnectionShares``), at the limit after making room;
/// once the server stops, each new one is closed at once, unanswered, while the requests already
/// in progress finish.
func httpServerAcceptPolicy(
    _ cls: UnsafeMutableRawPointer?, _ address: UnsafePointer<sockaddr>?, _ length: socklen_t
) -> MHD_Result {
    guard let cls else { return .NO }
    let server = Unmanaged<HTTPServerContext>.fromOpaque(cls).takeUnretainedValue()
    guard server.accepting.load(ordering: .relaxed) else { return .NO }
    // libmicrohttpd limits each full address; an IPv6 peer's whole /64 is limited here.
    return server.deadlines.admit(RateLimitKey(socketAddress: address)) ? .YES : .NO
}

/// The connection notice: registers each accepted connection, counted by its address, its
/// ``TrackedConnection`` retained into the socket context, and unregisters and releases it when
/// the connection closes (libmicrohttpd closes the socket after this returns).
func httpServerConnectionNotice(
    _ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
    _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ notice: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection, let socketContext else { return }
    let server = Unmanaged<HTTPServerContext>.fromOpaque(cls).takeUnretainedValue()
    switch notice {
    case .CONNECTION_NOTIFY_STARTED:
        let descriptor = ckeyauth_mhd_connection_socket(connection)
        guard descriptor >= 0 else { return }
        let tracked = server.deadlines.connectionStarted(
            descriptor: descriptor, clientAddress: clientAddress(of: connection),
            peer: RateLimitKey(socketAddress: ckeyauth_mhd_client_address(connection)))
        socketContext.pointee = Unmanaged.passRetained(tracked).toOpaque()
    case .CONNECTION_NOTIFY_CLOSED:
        guard let pointer = socketContext.pointee else { return }
        socketContext.pointee = nil
        server.deadlines.connectionClosed(Unmanaged<TrackedConnection>.fromOpaque(pointer).takeRetainedValue())
    default:
        break
    }
}

/// The tracking of `connection`, registered by the connection notice (alive until the
/// connection closes, so the callbacks of its requests may use it unretained).
private func trackedConnection(of connection: OpaquePointer) -> TrackedConnection? {
    ckeyauth_mhd_socket_context(connection).map { Unmanaged<TrackedConnection>.fromOpaque($0).takeUnretainedValue() }
}

/// The peer's address of `connection` as text, or "" for a family without one.
private func clientAddress(of connection: OpaquePointer) -> String {
    ckeyauth_mhd_client_address(connection).flatMap(ListenAddress.text(of:)) ?? ""
}

/// libmicrohttpd's URI callback: sees each request's target as sent, before the path is decoded
/// in place for the access handler, which then reads it as a C string that a `%00` ends. So
/// `/bc-authorize%00x` would be served as `/bc-authorize`, and a proxy's rule for the raw path
/// would judge another path than the server serves. Notes a `%00` in the path on the connection
/// (``TrackedConnection/noteRawTarget(pathHoldsNUL:)``); returns nil, which leaves the request's
/// context empty for the access handler's first call.
func httpServerRawTarget(
    _ cls: UnsafeMutableRawPointer?, _ uri: UnsafePointer<CChar>?, _ connection: OpaquePointer?
) -> UnsafeMutableRawPointer? {
    guard let uri, let connection else { return nil }
    var escapesNUL = false
    var cursor = uri
    // Up to the query, which the query iterator checks with its decoded lengths.
    while cursor.pointee != 0, cursor.pointee != CChar(UInt8(ascii: "?")) {
        if cursor.pointee == CChar(UInt8(ascii: "%")), cursor[1] == CChar(UInt8(ascii: "0")),
            cursor[2] == CChar(UInt8(ascii: "0"))
        {
            escapesNUL = true
            break
        }
        cursor += 1
    }
    trackedConnection(of: connection)?.noteRawTarget(pathHoldsNUL: escapesNUL)
    return nil
}

/// Header iterator: appends each field to the request (called synchronously, so the state is
/// passed unretained).
func httpServerCollectHeader(
    _ cls: UnsafeMutableRawPointer?, _ kind: MHD_ValueKind, _ key: UnsafePointer<CChar>?,
    _ value: UnsafePointer<CChar>?
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let state = Unmanaged<RequestState>.fromOpaque(cls).takeUnretainedValue()
    state.request.headers.add(String(cString: key), value.map { String(cString: $0) } ?? "")
    return .YES
}

/// Query iterator: keeps the first value of each decoded parameter and notes the names that
/// come again, which the responder refuses (``HTTPRequest/repeatedQueryNames``).
///
/// Names and values are read with their lengths, not as C strings: a `%00` decodes to a zero
/// byte, and reading up to it would turn `redirect_uri=https://rp.example/cb%00.evil.example`
/// into the registered `https://rp.example/cb` and cut `state` and `nonce` short, so that the
/// server would check and echo another value than the client sent. A zero byte marks the
/// request (``HTTPRequest/queryHoldsNUL``), which is then refused whole.
func httpServerCollectQueryItem(
    _ cls: UnsafeMutableRawPointer?, _ kind: MHD_ValueKind, _ key: UnsafePointer<CChar>?, _ keySize: Int,
    _ value: UnsafePointer<CChar>?, _ valueSize: Int
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let state = Unmanaged<RequestState>.fromOpaque(cls).takeUnretainedValue()
    if holdsZeroByte(key, keySize) || holdsZeroByte(value, valueSize) {
        state.request.queryHoldsNUL = true
        return .YES
    }
    guard let name = queryText(key, count: keySize), let text = value.map({ queryText($0, count: valueSize) }) ?? ""
    else {
        state.request.queryIsNotUTF8 = true
        return .YES
    }
    if state.request.query[name] == nil {
        state.request.query[name] = text
    } else {
        state.request.repeatedQueryNames.insert(name)
    }
    return .YES
}

/// Whether the `count` bytes at `text` hold a zero byte.
private func holdsZeroByte(_ text: UnsafePointer<CChar>?, _ count: Int) -> Bool {
    guard let text else { return false }
    return UnsafeRawBufferPointer(start: text, count: count).contains(0)
}

/// The `count` bytes at `text` as a string, or nil when they are not UTF-8.
private func queryText(_ text: UnsafePointer<CChar>, count: Int) -> String? {
    text.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
        String(validating: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }
}

/// Copies `response` into a libmicrohttpd response and queues it.
func httpServerQueue(_ response: HTTPResponse, on connection: OpaquePointer, server: HTTPServerContext) -> MHD_Result {
    let created = response.body.withUnsafeBytes { bytes in
        MHD_create_response_from_buffer(
            bytes.count, UnsafeMutableRawPointer(mutating: bytes.baseAddress), .RESPMEM_MUST_COPY)
    }
    guard let created else { return .NO }
    defer { MHD_destroy_response(created) }
    for field in response.headers {
        // libmicrohttpd refuses fields with CR or LF, so a bad value cannot split the response.
        _ = MHD_add_response_header(created, field.name, field.value)
    }
    // An old connection under pressure gives its slot back (``RequestDeadlines``), and once the
    // server is stopping every connection closes after its answer, so that a keep-alive client
    // does not keep the drain busy to its end; libmicrohttpd closes the connection after a
    // response that says so.
    if !server.accepting.load(ordering: .relaxed) || trackedConnection(of: connection)?.closesAfterResponse == true {
        _ = MHD_add_response_header(created, "Connection", "close")
    }
    let queued = MHD_queue_response(connection, UInt32(response.status), created)
    if queued == .YES, let tracked = trackedConnection(of: connection) {
        server.deadlines.responseQueued(
            on: tracked, bytes: response.body.count, now: ServerClock.monotonicNanoseconds())
    }
    return queued
}
