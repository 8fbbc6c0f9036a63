import Foundation
import KeyAuth
import Synchronization

/// Shows what a long step is doing: a spinner on a terminal while the key is generated and while
/// the device waits for approval, and the line to run on an existing device.
///
/// The approval line is printed by the hooks, synchronously and at most once, so that it appears
/// whether or not standard error is a terminal and before `--no-wait` returns; when the command
/// waits, a second line says until when and how to stop, so that a script or a log without a
/// terminal does not sit silent for minutes. The spinner follows the authenticator's states and
/// is drawn only on a terminal.
final class ProgressReporter: Sendable {
    private let io: CommandIO
    private let user: String
    private let showsApprovalLine: Bool
    private let waitsForApproval: Bool
    private let spinner: Spinner?
    private let approvalShown = Mutex(false)
    private let approvalSeen = Mutex(false)

    /// Whether the server said at least once that the device waits for approval, so that an
    /// interruption can be explained as a stopped wait rather than a failure.
    var sawApprovalPending: Bool { approvalSeen.withLock { $0 } }

    /// - Parameters:
    ///   - user: named in the approval line.
    ///   - showsApprovalLine: false where the error message already carries the instruction.
    ///   - waitsForApproval: whether the command polls until approval (no `--no-wait`).
    init(io: CommandIO, user: String, showsApprovalLine: Bool = true, waitsForApproval: Bool = true) {
        self.io = io
        self.user = user
        self.showsApprovalLine = showsApprovalLine
        self.waitsForApproval = waitsForApproval
        self.spinner = io.isErrorTerminal ? Spinner(write: io.writeError) : nil
    }

    /// How long the server keeps a pending registration before it expires (PROTOCOL.md section
    /// 4, "Register"); the server does not send it, so the client counts from its answer.
    static let pendingRegistrationLifetime: TimeInterval = 600

    /// What to run on an existing device, with this device's short code: the first 8
    /// characters of its KID, short enough to read from one screen and type on another.
    static func approvalHint(user: String, keyID: String, lead: String) -> String {
        let short = DeviceMatch.shortCode(keyID)
        return "\(lead): on a device already registered for \(user), run `keyauth devices approve \(short)` "
            + "(short code \(short) of KID \(keyID))"
    }

    /// The line printed while a command waits for approval: until when (a local time, when
    /// known), and that stopping leaves the device pending rather than undoing anything.
    static func waitingLine(until deadline: Date?, timeZone: TimeZone = .current) -> String {
        let until = deadline.map { " until " + Formatting.clockTime($0, timeZone: timeZone) } ?? ""
        return "Waiting for approval on another device\(until) (Ctrl-C to stop; the registration stays pending)"
    }

    /// Prints, once, what to run on an existing device, and, when the command waits, the
    /// waiting line.
    ///
    /// - Parameter deadline: when the pending registration expires, when known.
    func approvalNeeded(keyID: String, deadline: Date? = nil) {
        approvalSeen.withLock { $0 = true }
        guard showsApprovalLine else { return }
        let first = approvalShown.withLock { shown in
            defer { shown = true }
            return !shown
        }
        guard first else { return }
        spinner?.stop()
        io.printError(Self.approvalHint(user: user, keyID: keyID, lead: "Approval needed"))
        if waitsForApproval { io.printError(Self.waitingLine(until: deadline)) }
    }

    /// Runs `body` while following `authenticator`'s states on the terminal.
    ///
    /// - Parameter newKey: what a new key is, for the spinner ("a 3072-bit RSA key in the TPM").
    func run<Value: Sendable>(
        _ authenticator: Authenticator<AccessToken>, newKey: String = "an RSA key",
        _ body: () async throws(KeyAuthError) -> Value
    ) async throws(KeyAuthError) -> Value {
        guard let spinner else { return try await body() }
        let observer = Task {
            for await state in authenticator.stateUpdates() {
                switch state {
                case .generatingKey:
                    spinner.start("Generating \(newKey)…")
                case .awaitingApproval:
                    spinner.start("Waiting for approval (Ctrl-C to stop)…")
                default:
                    spinner.stop()
                }
            }
        }
        defer { spinner.stop() }
        do {
            let value = try await body()
            observer.cancel()
            await observer.value
            return value
        } catch {
            observer.cancel()
            await observer.value
            throw error
        }
    }
}
