import Foundation
import KeyAuth

/// `keyauth requests [--watch | --json]`: the sign-in requests waiting for this user's approval
/// (`--json`: as one JSON document); with `--watch`, waits for new ones (long polls), notifies
/// the desktop, and offers to answer each.
struct RequestsCommand {
    let context: CommandContext
    let options: RequestsOptions

    /// Seconds each long poll asks the server to wait; the client caps it under its timeout.
    static let watchWait = 25

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let client = session.client
        let first = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.signInRequests(accessToken: token, proofs: proofs)
        }
        guard options.watch else {
            context.io.printOutput(options.json ? Self.json(first.requests) : Self.table(first.requests))
            return
        }
        do {
            try await watch(session, from: first)
        } catch {
            // Control-C is how a watch ends, as its first line says: no error line for it. The
            // binary's exit status still says that a signal stopped it (130).
            // Standard input that ends is not that: it still fails (`.cancelled`, exit 77).
            guard Task.isCancelled else { throw error }
        }
    }

    /// Handles the requests already open, then every new one, until stopped (Control-C).
    private func watch(_ session: AccountSession, from first: SignInRequestList) async throws(KeyAuthError) {
        let io = context.io
        let approval = SignInApproval(session: session, pinFromStandardInput: options.pinFromStandardInput)
        let client = session.client
        var seen: Set<String> = []
        var list = first
        io.printError("Watching for sign-in requests for \(session.account.user); Control-C stops.")
        while true {
            for request in list.requests where !seen.contains(request.id) {
                seen.insert(request.id)
                try await offer(request, approval: approval)
            }
            let cursor = list.cursor
            let started = ContinuousClock.now
            list = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.signInRequests(accessToken: token, proofs: proofs, after: cursor, wait: Self.watchWait)
            }
            // A server with no long-poll place free answers at once: wait before asking again.
            let hasNew = list.requests.contains { !seen.contains($0.id) }
            if !hasNew, ContinuousClock.now - started < .seconds(1) {
                do {
                    try await Task.sleep(for: io.pollInterval)
                } catch {
                    throw KeyAuthError(.cancelled, "stopped watching")
                }
            }
        }
    }

    /// Shows one request, notifies the desktop, and asks what to do with it.
    private func offer(_ request: SignInRequest, approval: SignInApproval) async throws(KeyAuthError) {
        let io = context.io
        io.printError(SignInApproval.describe(request))
        // The notification names who asks, never a code: the user reads the code on the screen
        // that started the sign-in and types it here.
        if request.kind == .recovery {
            // A notice asks for no code: only whether it was the user.
            DesktopNotification.show(
                title: "keyauth: a recovery code was used", body: Formatting.printable(request.clientName),
                environment: io.environment)
        } else {
            DesktopNotification.show(
                title: "keyauth: approve a sign-in?",
                body:
                    "\(Formatting.printable(request.clientName)) asks to sign in as \(approval.session.account.user); "
                    + "type the code it shows in the terminal",
                environment: io.environment)
        }
        do {
            if try await approval.answer(request, allowsSkip: true) == .skip { io.printError("Left it unanswered.") }
        } catch {
            // A request answered elsewhere or expired meanwhile does not end the watch.
            guard error.code == .signInRequestClosed else { throw error }
            io.printError("keyauth: \(error.message)")
        }
    }

    /// The open requests as one JSON document for scripts: `{"requests": [...]}`, each entry
    /// with the members the server's list gives (PROTOCOL.md section 7), an empty array when
    /// none is open.
    static func json(_ requests: [SignInRequest]) -> String {
        JSONValue.object(["requests": .array(requests.map(\.jsonValue))])
            .serialized(leadingKeys: ["requests", "id", "kind", "client_name"])
    }

    /// The open requests as a table, or a line saying there are none.
    static func table(_ requests: [SignInRequest]) -> String {
        guard !requests.isEmpty else { return "No sign-in requests are waiting." }
        var rows = [["ID", "APPLICATION", "FROM", "CREATED", "EXPIRES"]]
        for request in requests {
            rows.append(
                [request.id, request.clientName, request.requestedFrom ?? "-", request.createdAt, request.expiresAt]
                    .map(
                        Formatting.printable))
        }
        return Formatting.columns(rows)
    }
}

/// A desktop notification through `notify-send`, when a graphical session is present; nothing
/// otherwise, and any failure is ignored (the terminal shows the request anyway).
enum DesktopNotification {
    static func show(title: String, body: String, environment: [String: String]) {
        guard environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil,
            let executable = executable(named: "notify-send", path: environment["PATH"])
        else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments(title: title, body: body)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try? process.run()
    }

    /// `notify-send`'s arguments. The body holds names the requester chose (an application's
    /// name), so it is escaped for the notification body's markup (a daemon would otherwise
    /// render `<a href=…>` or `<img src=…>` from them), and `--` ends the options, so a name
    /// that starts with `-` is text, never an option such as `--action`.
    static func arguments(title: String, body: String) -> [String] {
        ["--app-name=keyauth", "--", title, markupEscaped(body)]
    }

    /// `text` with the characters the notification body's markup reads (`&`, `<`, `>`, and the
    /// quotes) written as entities.
    static func markupEscaped(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&apos;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    /// The first executable `name` in `path`'s directories.
    static func executable(named name: String, path: String?) -> String? {
        for directory in (path ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
