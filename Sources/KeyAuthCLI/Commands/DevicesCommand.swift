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
            let devices = try await session.withAccessToken { (token) throws(KeyAuthError) in
                try await client.listDevices(accessToken: token)
            }
            if options.json {
                let entries = devices.map { device in
                    JSONValue.object([
                        "kid": .string(device.keyID), "name": .string(device.name),
                        "status": .string(device.status.rawValue),
                        "created_at": device.createdAt.map(JSONValue.string) ?? .null,
                        "last_login_at": device.lastLoginAt.map(JSONValue.string) ?? .null,
                        "this_device": .bool(device.keyID == ownKeyID),
                    ])
                }
                io.printOutput(
                    JSONValue.object(["devices": .array(entries)]).serialized(leadingKeys: ["devices", "kid"]))
            } else {
                io.printOutput(Self.table(devices, ownKeyID: ownKeyID))
            }
        case .approve(let keyID):
            try await session.withAccessToken { (token) throws(KeyAuthError) in
                try await client.approveDevice(keyID: keyID, accessToken: token)
            }
            io.printOutput("Approved device \(keyID).")
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

    static func table(_ devices: [Device], ownKeyID: String?) -> String {
        guard !devices.isEmpty else { return "No devices." }
        var rows = [["KID", "NAME", "STATUS", "CREATED", "LAST LOGIN"]]
        for device in devices {
            rows.append([
                device.keyID + (device.keyID == ownKeyID ? " *" : ""), device.name, device.status.rawValue,
                device.createdAt ?? "-", device.lastLoginAt ?? "never",
            ])
        }
        var widths = [Int](repeating: 0, count: 5)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        var lines = rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[index] - cell.count)
            }.joined(separator: "  ")
        }
        if ownKeyID.map({ id in devices.contains { $0.keyID == id } }) == true { lines.append("* this device") }
        return lines.joined(separator: "\n")
    }
}
