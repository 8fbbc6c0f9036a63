import KeyAuth

/// The account page's recovery codes: how many are left, a new set shown once, and the button
/// that asks for a new set, which one of the user's devices approves.
struct RecoveryCodesSection: Sendable {
    var basePath: String
    var csrf: String
    /// Codes not used yet.
    var remaining: Int
    /// The account page's request for a new set that waits for a device, or was approved and
    /// can still be collected, if any: its id (which the show form names), the code the device
    /// is to be given, and whether a device approved it already.
    var pending: (id: String, code: String, approved: Bool)?
    /// A new set, on the one answer that shows it.
    var newCodes: [String]?

    var html: HTML {
        let status: HTML =
            remaining == 0
            ? "You have no recovery codes (or none left)."
            : "\(String(remaining)) of \(String(RecoveryCodes.count)) recovery codes left."
        return """
            <section class="recovery-codes">
            <h2>Recovery codes</h2>
            <p data-recovery-codes-left="\(String(remaining))">\(status) Each one enrols a new device, once, \
            when every device is lost: <code>keyauth register --recovery-code -</code>.</p>
            \(shownCodes)
            \(action)
            </section>
            """
    }

    /// The new set, with the warning that it is not shown again.
    private var shownCodes: HTML? {
        guard let newCodes else { return nil }
        let items = newCodes.map { code -> HTML in "<li><code>\(code)</code></li>" }
        return """
            <div class="new-recovery-codes"><p><strong>Your new recovery codes.</strong> They are shown only now: \
            write them down or keep them in a password manager, away from your devices. The previous codes no \
            longer work.</p>
            <ol>\(items.joined())</ol></div>
            """
    }

    /// The show form while a device's approval is awaited or can be collected, else the button
    /// that asks for it.
    private var action: HTML {
        if let pending {
            let prompt: HTML =
                pending.approved
                ? "<p class=\"approval-code\">Approved on one of your devices:</p>"
                : """
                <p class="approval-code">On one of your devices, run <code>keyauth approve</code> and type \
                <strong data-approval-code>\(pending.code)</strong>, then:</p>
                """
            return """
                \(prompt)
                <form method="post" action="\(PageDocument.accountPath("/recovery-codes/show", basePath: basePath))">\
                \(PageDocument.hiddenFields([("csrf", csrf), ("request", pending.id)]))\
                <button type="submit">Show the new codes</button></form>
                """
        }
        return """
            <form method="post" action="\(PageDocument.accountPath("/recovery-codes", basePath: basePath))">\
            \(PageDocument.hidden("csrf", csrf))<button type="submit" class="secondary">Make new recovery codes\
            </button></form>
            <p class="muted">A new set replaces the old one, and needs an approval on one of your devices.</p>
            """
    }
}
