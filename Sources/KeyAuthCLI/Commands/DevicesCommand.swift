import Foundation
import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// `keyauth devices`: list, approve or revoke the user's devices with the account's token.
struct DevicesCommand {
    let context: CommandContext
    let options: DevicesOptions

    func run() async throws(KeyAuthError) {
        let session = try AccountSession.open(
            context: context, account: options.account, pinFromStandardInput: options.pinFromStandardInput,
            waitForApproval: false)
        let client = session.client
        let ownKeyID = (try? session.keys.loadPublicKey().fingerprint) ?? session.account.keyID
        let io = context.io
        switch options.action {
        case .list:
            let list = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.listDevices(accessToken: token, proofs: proofs)
            }
            if options.json {
                let entries = list.devices.map { device in
                    JSONValue.object([
                        "kid": .string(device.keyID), "name": .string(device.name),
                        "status": .string(device.status.rawValue),
                        "created_at": device.createdAt.map(JSONValue.string) ?? .null,
                        "last_login_at": device.lastLoginAt.map(JSONValue.string) ?? .null,
                        "registered_from": device.registeredFrom.map(JSONValue.string) ?? .null,
                        "tier": device.tier.map { JSONValue.string($0.rawValue) } ?? .null,
                        "this_device": .bool(device.keyID == ownKeyID),
                    ])
                }
                io.printOutput(
                    JSONValue.object(["devices": .array(entries), "truncated": .bool(list.isTruncated)])
                        .serialized(leadingKeys: ["devices", "kid"]))
            } else {
                io.printOutput(Self.table(list, ownKeyID: ownKeyID))
            }
        case .approve(let prefix):
            let devices = try await listedDevices(session)
            try await approve(try DeviceMatch.device(prefix, in: devices, user: session.account.user), session)
        case .choosePending:
            let pending = try await listedDevices(session).filter { $0.status == .pending }
            guard let chosen = try await choose(from: pending, user: session.account.user) else { return }
            try await approve(chosen, session)
        case .revoke(let prefix):
            let devices = try await listedDevices(session)
            // A whole KID beyond the first 1000 devices is still revoked: the server knows it.
            let device: Device? =
                InputRules.isValidKeyID(prefix) && !devices.contains { $0.keyID == prefix }
                ? nil : try DeviceMatch.device(prefix, in: devices, user: session.account.user)
            let keyID = device?.keyID ?? prefix
            try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
                try await client.revokeDevice(keyID: keyID, accessToken: token, proofs: proofs)
            }
            let name = device.map { " \"\(Formatting.printable($0.name))\"" } ?? ""
            // Revoking a device that never logged in refuses its registration: the server records
            // it as denied, and the message says what happened to it.
            if device?.status == .pending {
                io.printOutput("Denied pending device \(keyID)\(name); it cannot log in.")
            } else {
                io.printOutput("Revoked device \(keyID)\(name).")
            }
            if keyID == ownKeyID {
                try session.provider.credentials.deleteToken(account: session.account.name)
                io.printError(
                    "This was this device's own key; it can no longer log in. "
                        + "Run `keyauth reset --account \(session.account.name) --local-only` to remove it here.")
            }
        }
    }

    /// The user's devices as the list shows them, for matching a short code.
    private func listedDevices(_ session: AccountSession) async throws(KeyAuthError) -> [Device] {
        let client = session.client
        return try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.listDevices(accessToken: token, proofs: proofs)
        }.devices
    }

    /// Approves `device` with a fresh assertion of this device naming it, after this device's
    /// presence check: the server takes no approval on an access token alone.
    private func approve(_ device: Device, _ session: AccountSession) async throws(KeyAuthError) {
        var claims = JWTClaims()
        claims.set(AuthenticationMethod.approvedDeviceClaim, string: device.keyID)
        let assertion = try await ApprovalSigner(session: session).sign(
            claims,
            reason:
                "Approve the new device \(Formatting.printable(device.name)) (\(DeviceMatch.shortCode(device.keyID))) "
                + "for \(session.account.user)", requiringPresence: true)
        let client = session.client
        let approved = try await session.withAccessToken { (token, proofs) throws(KeyAuthError) in
            try await client.approveDevice(
                keyID: device.keyID, assertion: assertion, accessToken: token, proofs: proofs)
        }
        context.io.printOutput(Self.approvalLine(approved))
    }

    /// Shows the pending devices and asks on the terminal which one to approve.
    ///
    /// - Returns: the device chosen, or nil when none waits or the person chose none.
    /// - Throws: `.usage` without a terminal, after listing them, since nobody can choose.
    private func choose(from pending: [Device], user: String) async throws(KeyAuthError) -> Device? {
        let io = context.io
        guard !pending.isEmpty else {
            io.printOutput("No device of \(user) waits for approval.")
            return nil
        }
        var lines = ["Devices of \(user) waiting for approval:"]
        let now = Date()
        for (index, device) in pending.enumerated() {
            lines.append("  \(index + 1)) \(Self.pendingSummary(device, now: now))")
        }
        io.printOutput(lines.joined(separator: "\n"))
        guard isatty(io.standardInput) == 1, io.terminalReader.isAvailable() else {
            throw CommandParser.usage(
                "choose one: `keyauth devices approve SHORT-CODE` with the code of the device to approve", .devices)
        }
        let answer = try await BlockingThread.read(
            io.terminalReader, prompt: "Approve which one? [1-\(pending.count), or Enter for none] ", echo: true)
        let text = answer.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }.trimmingCharacters(in: .whitespaces)
        guard !text.isEmpty else {
            io.printOutput("Nothing was approved.")
            return nil
        }
        if let number = Int(text), (1...pending.count).contains(number) { return pending[number - 1] }
        guard DeviceMatch.isValidPrefix(text) else {
            throw KeyAuthError(
                .invalidArgument, "\"\(Formatting.printable(text))\" is neither a number nor a short code")
        }
        return try DeviceMatch.device(text, in: pending, user: user)
    }

    /// `SHORTCODE "name", registered 5 min ago from ADDRESS`, for choosing a pending device.
    static func pendingSummary(_ device: Device, now: Date) -> String {
        let name = device.name.isEmpty ? "" : " \"\(Formatting.printable(device.name))\""
        let age =
            device.createdAt.flatMap { ISO8601DateFormatter().date(from: $0) }
            .map { "registered \(Formatting.duration(max(0, now.timeIntervalSince($0)))) ago" }
            ?? "registered at an unknown time"
        let address = device.registeredFrom.map { "from \(Formatting.printable($0))" } ?? "from an unknown address"
        return "\(DeviceMatch.shortCode(device.keyID))\(name), \(age) \(address)"
    }

    /// What was approved, so that a person sees whose registration they let in: the name it
    /// gave, when, and the address the server saw it come from.
    static func approvalLine(_ device: Device) -> String {
        let name = device.name.isEmpty ? "" : " \"\(Formatting.printable(device.name))\""
        let created =
            device.createdAt.map { "registered \(Formatting.printable($0))" } ?? "registered at an unknown time"
        let address = device.registeredFrom.map { "from \(Formatting.printable($0))" } ?? "from an unknown address"
        return "Approved device \(device.keyID)\(name), \(created) \(address)."
    }

    static func table(_ list: DeviceList, ownKeyID: String?) -> String {
        let devices = list.devices
        guard !devices.isEmpty else { return "No devices." }
        var rows = [["KID", "NAME", "STATUS", "TIER", "CREATED", "LAST LOGIN", "REGISTERED FROM"]]
        for device in devices {
            rows.append(
                [
                    device.keyID + (device.keyID == ownKeyID ? " *" : ""), device.name,
                    device.status == .pending ? "pending !" : device.status.rawValue, device.tier?.rawValue ?? "-",
                    device.createdAt ?? "-", device.lastLoginAt ?? "never", device.registeredFrom ?? "-",
                ].map(Formatting.printable))
        }
        var lines = [Formatting.columns(rows)]
        if ownKeyID.map({ id in devices.contains { $0.keyID == id } }) == true { lines.append("* this device") }
        let pending = devices.filter { $0.status == .pending }
        if !pending.isEmpty {
            lines.append(
                "! \(pending.count) waiting for approval: `keyauth devices approve` shows them and asks which, "
                    + "or `keyauth devices approve \(DeviceMatch.shortCode(pending[0].keyID))`")
        }
        if list.isTruncated {
            lines.append("showing the first \(devices.count) devices; the server has more")
        }
        return lines.joined(separator: "\n")
    }
}
