import KeyAuth

/// The signed-in account page: the user's devices and what can be done with each.
struct DevicesPage: Sendable {
    /// One device as the page shows it.
    struct Device: Sendable {
        var record: DeviceRecord
        /// The state a client sees (`expired` for a pending device past its lifetime).
        var status: DeviceStatus
        /// The code a device approval this page asked for waits for, typed on another device.
        var approvalCode: String?
    }

    var basePath: String
    var session: BrowserSessionRecord
    var devices: [Device]
    var message: String?
    /// The recovery codes section, below the devices.
    var recoveryCodes: RecoveryCodesSection?

    var html: HTML {
        let approver = devices.first { $0.record.kid == session.approvingKID }
        let approvedBy: HTML = approver.map { "device <strong>\($0.record.name)</strong>" } ?? "one of your devices"
        let current = devices.filter { $0.status == .active || $0.status == .pending }
        let past = devices.filter { $0.status != .active && $0.status != .pending }
        let rows = current.map { row($0, isApprover: $0.record.kid == session.approvingKID) }
        let pastRows = past.map { row($0, isApprover: false) }
        return PageDocument(
            basePath: basePath, title: "Your devices",
            header: """
                <span>Signed in as <strong>\(session.user)</strong></span>
                <form method="post" class="inline" action="\(action("/sign-out"))">
                \(PageDocument.hidden("csrf", session.csrfToken))
                <button type="submit" class="secondary">Sign out</button>
                </form>
                """,
            body: """
                <main>
                <h2>Your devices</h2>
                \(PageDocument.message(message))
                <p class="muted">Signed in with the approval of \(approvedBy) \
                (\(Self.describe(methods: session.methods))). The session ends after 15 minutes \
                without use, when you sign out, or when that device is revoked.</p>
                \(Self.table(rows))
                \(pastRows.isEmpty ? HTML.empty : """
                    <details class="past-devices"><summary>\(String(pastRows.count)) revoked, denied or \
                    expired</summary>
                    \(Self.table(pastRows))
                    </details>
                    """)
                \(recoveryCodes?.html)
                </main>
                """
        ).html
    }

    /// A table of device rows.
    private static func table(_ rows: [HTML]) -> HTML {
        """
        <table>
        <thead><tr><th>Name</th><th>Status</th><th>Tier</th><th>Created</th><th>Last login</th>\
        <th>Registered from</th><th>Key id</th><th>Actions</th></tr></thead>
        <tbody>
        \(rows.joined(separator: "\n"))
        </tbody>
        </table>
        """
    }

    /// RFC 8176 method codes in words people use ("a PIN", not `pin`).
    static func describe(methods: [String]) -> String {
        let words: [String: String] = [
            AuthenticationMethod.pin.rawValue: "a PIN", AuthenticationMethod.userPresence.rawValue: "a presence check",
            AuthenticationMethod.softwareKey.rawValue: "a key in software",
            AuthenticationMethod.hardwareKey.rawValue: "a key in hardware",
        ]
        let described = methods.map { words[$0] ?? $0 }
        return described.isEmpty ? "no method reported" : described.joined(separator: ", ")
    }

    /// A time as the page shows it: UTC in the markup, which the page's script turns into the
    /// browser's local time or "5 minutes ago"; whole on one line.
    private static func time(_ seconds: Int64?, none: String) -> HTML {
        guard let seconds else { return "\(none)" }
        let text = RFC3339.string(fromSeconds: seconds)
        return "<time datetime=\"\(text)\">\(text)</time>"
    }

    /// One device's row, with the forms its state allows.
    private func row(_ device: Device, isApprover: Bool) -> HTML {
        let record = device.record
        let csrf = session.csrfToken
        var forms: [HTML] = []
        func button(_ verb: AccountPage.DeviceAction, _ text: String, style: String = "") -> HTML {
            let styled: HTML? = style.isEmpty ? nil : " class=\"\(style)\""
            return """
                <form method="post" action="\(action("/devices/\(record.kid)/\(verb.rawValue)"))">\
                \(PageDocument.hidden("csrf", csrf))<button type="submit"\(styled)>\
                \(text)</button></form>
                """
        }
        switch device.status {
        case .pending:
            if let approvalCode = device.approvalCode {
                // The code is shown here, where the approval started, and typed on the device.
                forms.append(
                    """
                    <p class="approval-code">On one of your devices, run <code>keyauth approve</code> and type \
                    <strong data-approval-code>\(approvalCode)</strong>, then reload.</p>
                    """)
            } else {
                forms.append(button(.approve, "Approve"))
            }
            forms.append(button(.deny, "Deny", style: "danger"))
        case .active:
            forms.append(button(.revoke, "Revoke", style: "danger"))
        default:
            break
        }
        if device.status == .active || device.status == .pending {
            // Renaming is asked for, not an open field on every row.
            forms.append(
                """
                <details class="rename"><summary>Rename</summary>\
                <form method="post" action="\(action("/devices/\(record.kid)/rename"))">\
                \(PageDocument.hidden("csrf", csrf))<input type="text" name="name" aria-label="New name" maxlength="64" \
                required value="\(record.name)"> <button type="submit" class="secondary">Rename\
                </button></form></details>
                """)
        }
        let approverMark: HTML? = isApprover ? " <span class=\"muted\">(signed in with)</span>" : nil
        return """
            <tr data-kid="\(record.kid)">
            <td class="name">\(record.name)\(approverMark)</td>
            <td class="status status-\(device.status.rawValue)">\(device.status.rawValue)</td>
            <td class="tier tier-\(record.tier.rawValue)" data-label="Tier">\(record.tier.rawValue)</td>
            <td data-label="Created">\(Self.time(record.createdAt, none: "unknown"))</td>
            <td data-label="Last login">\(Self.time(record.lastLoginAt, none: "never"))</td>
            <td data-label="Registered from">\(record.registeredFrom ?? "unknown")</td>
            <td class="kid" data-label="Key id"><code title="\(record.kid)">\(String(record.kid.prefix(8)))</code></td>
            <td class="actions">\(forms.joined())</td>
            </tr>
            """
    }

    /// The form action of `path` under the account page.
    private func action(_ path: String) -> String {
        PageDocument.accountPath(path, basePath: basePath)
    }
}
