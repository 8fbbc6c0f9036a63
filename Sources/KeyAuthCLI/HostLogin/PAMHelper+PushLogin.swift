import Foundation
import KeyAuth

/// The helper's push login (``PushLogin``): kept apart from the device key login it falls back
/// from, so that each reads on its own.
extension PAMHelper {
    /// A push login of `keyauthUser` with the host's client credentials, read as root before.
    ///
    /// - Parameter hostClient: the host's `pam.conf`: nil when there is none (the host is no
    ///   client: `unknown`), an error for one that is refused (`refused`, never ignored: an
    ///   administrator who wrote one meant push login to work, or to fail for a reason).
    func push(_ request: PAMHelperRequest, hostClient: Result<HostClientConfig?, KeyAuthError>, keyauthUser: String)
        async -> Answer
    {
        let credentials: HostClientConfig
        switch hostClient {
        case .success(let loaded?): credentials = loaded
        case .success(nil):
            let path = request.hostConfig ?? HostClientConfig.defaultPath
            return .unknown("no \(path): this host is no client of the server for push login")
        case .failure(let error): return .refused(error.message)
        }
        let client: KeyAuthClient
        do {
            client = try KeyAuthClient(
                serverURL: request.server, timeout: Self.networkTimeout(answerTimeout: request.answerTimeout))
        } catch {
            return .refused(error.message)
        }
        let output = output
        let input = input
        return await PushLogin(
            client: client, credentials: credentials, keyauthUser: keyauthUser, linuxUser: request.user,
            send: { line in DescriptorIO.writeAll(output, line + "\n") },
            moduleGone: { Self.peerClosed(input) }
        ).run()
    }

    /// Whether the other end of `descriptor` (the module's socket) has closed: the module sends
    /// nothing while a push login waits, so a hang-up or an end of input is all there is to see.
    static func peerClosed(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, 0) == 1 else { return false }
        if entry.revents & (Int16(POLLHUP) | Int16(POLLERR) | Int16(POLLNVAL)) != 0 { return true }
        // Readable: an end of input reads as 0 bytes; bytes the module sent are left unread.
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 0
    }
}
