import KeyAuth

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
            let list = try await session.withAccessToken { (token) throws(KeyAuthError) in
                try await client.listDevices(accessToken: token)
            }
            if options.json {
                let entries = list.devices.map { device in
                    JSONValue.object([
                        "kid": .string(device.keyID), "name": .string(device.name),
                        "status": .string(device.status.rawValue),
                        "created_at": device.createdAt.map(JSONValue.string) ?? .null,
                        "last_login_at": device.lastLoginAt.map(JSONValue.string) ?? .null,
                        "registered_from": device.registeredFrom.map(JSONValue.string) ?? .null,
                        "this_device": .bool(device.keyID == ownKeyID),
                    ])
                }
                io.printOutput(
                    JSONValue.object(["devices": .array(entries), "truncated": .bool(list.isTruncated)])
                        .serialized(leadingKeys: ["devices", "kid"]))
            } else {
                io.printOutput(Self.table(list, ownKeyID: ownKeyID))
            }
        case .approve(let keyID):
            let device = try await session.withAccessToken { (token) throws(KeyAuthError) in
                try await client.approveDevice(keyID: keyID, accessToken: token)
            }
            io.printOutput(Self.approvalLine(device))
        case .revoke(let keyID):
            try await session.withAccessToken { (token) throws(KeyAuthError) in
                try await client.revokeDevice(keyID: keyID, accessToken: token)
            }
            io.printOutput("Revoked device \(keyID).")
            if keyID == ownKeyID {
                try session.provider.credentials.deleteToken(account: session.account.name)
                io.printError(
                    "This was this device's own key; it can no longer log in. "
                        + "Run `keyauth reset --account \(session.account.name) --local-only` to remove it here.")
            }
        }
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
        var rows = [["KID", "NAME", "STATUS", "CREATED", "LAST LOGIN", "REGISTERED FROM"]]
        for device in devices {
            rows.append(
                [
                    device.keyID + (device.keyID == ownKeyID ? " *" : ""), device.name, device.status.rawValue,
                    device.createdAt ?? "-", device.lastLoginAt ?? "never", device.registeredFrom ?? "-",
                ].map(Formatting.printable))
        }
        var lines = [Formatting.columns(rows)]
        if ownKeyID.map({ id in devices.contains { $0.keyID == id } }) == true { lines.append("* this device") }
        if list.isTruncated {
            lines.append("showing the first \(devices.count) devices; the server has more")
        }
        return lines.joined(separator: "\n")
    }
}
