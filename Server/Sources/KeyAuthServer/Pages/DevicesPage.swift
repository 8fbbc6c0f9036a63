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

    var html: HTML {
        let approver = devices.first { $0.record.kid == session.approvingKID }
        let approvedBy: HTML = approver.map { "device <strong>\($0.record.name)</strong>" } ?? "one of your devices"
        let rows = devices.map { row($0, isApprover: $0.record.kid == session.approvingKID) }
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
                (\(session.methods.joined(separator: " "))). The session ends after 15 minutes \
                without use, when you sign out, or when that device is revoked.</p>
                <table>
                <thead><tr><th>Name</th><th>Status</th><th>Key store</th><th>Created</th><th>Last login</th>\
                <th>Registered from</th><th>Key id</th><th>Actions</th></tr></thead>
                <tbody>
                \(rows.joined(separator: "\n"))
                </tbody>
                </table>
                </main>
                """
        ).html
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
            forms.append(
                """
                <form method="post" action="\(action("/devices/\(record.kid)/rename"))">\
                \(PageDocument.hidden("csrf", csrf))<input type="text" name="name" aria-label="New name" maxlength="64" \
                required value="\(record.name)"> <button type="submit" class="secondary">Rename\
                </button></form>
                """)
        }
        let approverMark: HTML? = isApprover ? " <span class=\"muted\">(signed in with)</span>" : nil
        return """
            <tr data-kid="\(record.kid)">
            <td class="name">\(record.name)\(approverMark)</td>
            <td class="status status-\(device.status.rawValue)">\(device.status.rawValue)</td>
            <td>not reported</td>
            <td>\(RFC3339.string(fromSeconds: record.createdAt))</td>
            <td>\(record.lastLoginAt.map(RFC3339.string(fromSeconds:)) ?? "never")</td>
            <td>\(record.registeredFrom ?? "unknown")</td>
            <td class="kid">\(record.kid)</td>
            <td class="actions">\(forms.joined())</td>
            </tr>
            """
    }

    /// The form action of `path` under the account page.
    private func action(_ path: String) -> String {
        PageDocument.accountPath(path, basePath: basePath)
    }
}
