import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The browser's side, run by ``HeadlessChromium``: it signs in through /account while running
/// `keyauth approve` on the laptop, approves the pending phone (the page asks the laptop, which
/// types the code the page shows), revokes it, checks the cookie and the policy, tries a
/// cross-site form post, saves a screenshot and signs out.
private let browserSteps = #"""
    def steps(arguments):
        server, keyauth, laptop_home, phone_kid, screenshot, pin = arguments
        with urllib.request.urlopen(server + "/account") as response:
            seen["csp"] = response.headers["Content-Security-Policy"]
            page = response.read().decode()
            seen["inline_script"] = "<script>" in page or "onclick" in page
            seen["scripts"] = page.count("<script")
        def row_status(kid):
            # textContent: a revoked device's row is inside the closed "revoked" toggle.
            cell = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"] td.status' % kid)
            return cell.get_attribute("textContent").strip()
        driver.get(server + "/account")
        driver.find_element(By.NAME, "user").send_keys("alice")
        button("Sign in").click()
        code = wait.until(lambda d: d.find_element(By.ID, "binding-code")).text.strip()
        seen["code"] = code
        approval = run_keyauth(keyauth, laptop_home, ["approve", "--pin-stdin"], code + "\n" + pin + "\n")
        seen["approve_status"] = approval.returncode
        seen["approve_error"] = approval.stderr
        wait.until(lambda d: button("Sign out") is not None)
        seen["signed_in"] = True
        cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
        session = cookies.get("keyauth-session", {})
        seen["cookie"] = {"httpOnly": session.get("httpOnly"), "sameSite": session.get("sameSite"),
                          "path": session.get("path")}
        seen["pending_before"] = row_status(phone_kid)
        # The signed-in page at a desktop's width and at a phone's (390 px), for docs/.
        driver.set_window_size(1280, 800)
        driver.save_screenshot(screenshot)
        driver.set_window_size(390, 844)
        seen["phone_overflow"] = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        driver.save_screenshot(screenshot.replace(".png", "-phone.png"))
        driver.set_window_size(1280, 800)
        row = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"]' % phone_kid)
        button("Approve", row).click()
        # The session alone approves nothing: the page shows a code for the laptop to type.
        device_code = wait.until(lambda d: d.find_element(
            By.CSS_SELECTOR, '[data-kid="%s"] [data-approval-code]' % phone_kid)).text.strip()
        seen["pending_after_click"] = row_status(phone_kid)
        device_approval = run_keyauth(keyauth, laptop_home, ["approve", "--pin-stdin"],
                                      device_code + "\n" + pin + "\n")
        seen["device_approve_status"] = device_approval.returncode
        seen["device_approve_error"] = device_approval.stderr
        # The laptop must not show the code (the person types what the page shows). Times, dates,
        # durations and IDs in its output hold digits by chance, so they are blanked first.
        import re
        said = device_approval.stderr + device_approval.stdout
        said = re.sub(r"\d+([-:T]\d+)+Z?", " ", said)
        said = re.sub(r"\d+ ?(s|seconds?|minutes?|min)\b", " ", said)
        said = re.sub(r"[A-Za-z0-9_-]*[A-Za-z_-][A-Za-z0-9_-]*", " ", said)
        seen["device_approve_shows_code"] = re.search(
            r"(?<!\d)" + re.escape(device_code) + r"(?!\d)", said) is not None
        driver.get(server + "/account")
        wait.until(lambda d: row_status(phone_kid) == "active")
        seen["after_approve"] = row_status(phone_kid)
        row = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"]' % phone_kid)
        button("Revoke", row).click()
        wait.until(lambda d: row_status(phone_kid) == "revoked")
        seen["after_revoke"] = row_status(phone_kid)
        revoked_row = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"]' % phone_kid)
        seen["revoked_hidden"] = driver.execute_script(
            "return !arguments[0].checkVisibility()", revoked_row)
        # A form on another origin posts to the sign-out endpoint.
        driver.get("data:text/html,<form method=post action='" + server
                   + "/account/sign-out'><input name=csrf value=x><button>go</button></form>")
        driver.find_element(By.TAG_NAME, "button").click()
        wait.until(lambda d: d.current_url.startswith(server)
                   and d.find_elements(By.TAG_NAME, "h2"))
        seen["cross_site_page"] = driver.find_element(By.TAG_NAME, "body").text
        driver.get(server + "/account")
        seen["still_signed_in"] = button("Sign out") is not None
        button("Sign out").click()
        wait.until(lambda d: d.find_elements(By.NAME, "user"))
        seen["signed_out"] = True
    """#

@Suite("The account page in headless Chromium", .serialized, .timeLimit(.minutes(15)))
struct AccountPageBrowserTests {
    @Test(
        "sign in by approving with keyauth approve, approve a pending device, revoke it, refuse a cross-site post, sign out",
        .enabled(
            if: ExternalTools.shouldRun(installed: HeadlessChromium.isInstalled),
            "chromium and chromium-driver are not installed"))
    func signInApproveRevokeSignOut() throws {
        let directory = TemporaryDirectory("keyauth-account-page")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { _ = server.terminate() }
        let laptop = TemporaryDirectory("keyauth-account-laptop")
        let phone = TemporaryDirectory("keyauth-account-phone")
        defer {
            laptop.remove()
            phone.remove()
        }
        func keyauth(_ home: TemporaryDirectory, _ arguments: [String], input: String = "") throws -> CommandResult {
            try runProcess(
                Binaries.keyauth, arguments,
                environment: [
                    "KEYAUTH_HOME": home.path, "HOME": home.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                ],
                standardInput: input)
        }
        let register = ["register", "--server", server.url, "--user", "alice", "--bits", "2048"]
        // The laptop checks a PIN: approving a device needs a presence check on the approving one.
        let pin = "135792"
        try #require(
            try keyauth(laptop, register + ["--name", "laptop", "--pin-stdin"], input: pin + "\n").status == 0)
        try #require(
            try keyauth(phone, register + ["--name", "phone", "--no-wait", "--presence", "none"]).status == 75)
        let status = try JSONValue(parsing: try keyauth(phone, ["status", "--json"]).standardOutput)
        let phoneKID = try #require(status["accounts"]?.arrayValue?.first?["kid"]?.stringValue)

        let output = HeadlessChromium.outputDirectory()
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let screenshot = output + "/account-page.png"
        try? FileManager.default.removeItem(atPath: screenshot)
        let seen = try HeadlessChromium.run(
            browserSteps, arguments: [server.url, Binaries.keyauth, laptop.path, phoneKID, screenshot, pin],
            in: directory.path)
        #expect(seen["failure"] == nil, "\(seen["failure"] ?? .null) \(seen["page"] ?? .null) \(server.log)")
        let csp = seen["csp"]?.stringValue ?? ""
        #expect(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"))
        #expect(!csp.contains("unsafe-inline"))
        #expect(seen["inline_script"] == .bool(false))
        #expect(seen["approve_status"] == .integer(0), "\(seen["approve_error"] ?? .null)")
        #expect(seen["signed_in"] == .bool(true))
        #expect(seen["cookie"]?["httpOnly"] == .bool(true))
        // Lax, so that a relying party's redirect to /authorize finds the session (PROTOCOL.md 9).
        #expect(seen["cookie"]?["sameSite"] == .string("Lax"))
        #expect(seen["pending_before"] == .string("pending"))
        #expect(seen["pending_after_click"] == .string("pending"))
        #expect(seen["device_approve_status"] == .integer(0), "\(seen["device_approve_error"] ?? .null)")
        #expect(seen["device_approve_shows_code"] == .bool(false))
        #expect(seen["after_approve"] == .string("active"))
        #expect(seen["after_revoke"] == .string("revoked"))
        // Revoked devices wait behind a toggle; the page fits a 390 px phone without sideways scrolling.
        #expect(seen["revoked_hidden"] == .bool(true))
        #expect(seen["phone_overflow"] == .integer(0), "\(seen["phone_overflow"] ?? .null)")
        #expect(seen["cross_site_page"]?.stringValue?.contains("Refused") == true)
        #expect(seen["still_signed_in"] == .bool(true))
        #expect(seen["signed_out"] == .bool(true))
        for path in [screenshot, screenshot.replacingOccurrences(of: ".png", with: "-phone.png")] {
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            #expect((attributes[.size] as? Int ?? 0) > 10_000, "\(path)")
        }
    }
}
