import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The browser's side: Debian's python3-selenium driving headless Chromium over WebDriver. It
/// signs in through /account while running `keyauth approve` on the laptop, approves the pending
/// phone, revokes it, checks the cookie and the policy, tries a cross-site form post, saves a
/// screenshot and signs out; it prints one JSON line of what it saw.
private let browserScript = #"""
    import json, subprocess, sys, tempfile, time, urllib.request
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, keyauth, laptop_home, phone_kid, screenshot = sys.argv[1:6]
    seen = {}
    with urllib.request.urlopen(server + "/account") as response:
        seen["csp"] = response.headers["Content-Security-Policy"]
        page = response.read().decode()
        seen["inline_script"] = "<script>" in page or "onclick" in page
        seen["scripts"] = page.count("<script")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--user-data-dir=" + tempfile.mkdtemp(prefix="keyauth-chromium-")]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"),
                              options=options)
    # A form's answer reloads the page: an element found before it goes stale, so look again.
    wait = WebDriverWait(driver, 60, ignored_exceptions=[NoSuchElementException, StaleElementReferenceException])
    def button(text, scope=None):
        for candidate in (scope or driver).find_elements(By.TAG_NAME, "button"):
            if candidate.text.strip() == text:
                return candidate
        return None
    def row_status(kid):
        return driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"] td.status' % kid).text
    try:
        driver.get(server + "/account")
        driver.find_element(By.NAME, "user").send_keys("alice")
        button("Sign in").click()
        code = wait.until(lambda d: d.find_element(By.ID, "binding-code")).text.strip()
        seen["code"] = code
        approval = subprocess.run([keyauth, "approve", "--pin-stdin"], input=code + "\n", capture_output=True,
                                  text=True, timeout=60,
                                  env={"KEYAUTH_HOME": laptop_home, "HOME": laptop_home, "PATH": "/usr/bin:/bin",
                                       "LANG": "C.UTF-8"})
        seen["approve_status"] = approval.returncode
        seen["approve_error"] = approval.stderr
        wait.until(lambda d: button("Sign out") is not None)
        seen["signed_in"] = True
        cookies = {cookie["name"]: cookie for cookie in driver.get_cookies()}
        session = cookies.get("keyauth-session", {})
        seen["cookie"] = {"httpOnly": session.get("httpOnly"), "sameSite": session.get("sameSite"),
                          "path": session.get("path")}
        seen["pending_before"] = row_status(phone_kid)
        driver.save_screenshot(screenshot)
        row = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"]' % phone_kid)
        button("Approve", row).click()
        wait.until(lambda d: row_status(phone_kid) == "active")
        seen["after_approve"] = row_status(phone_kid)
        row = driver.find_element(By.CSS_SELECTOR, '[data-kid="%s"]' % phone_kid)
        button("Revoke", row).click()
        wait.until(lambda d: row_status(phone_kid) == "revoked")
        seen["after_revoke"] = row_status(phone_kid)
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
    except Exception as error:
        seen["failure"] = repr(error)
        seen["page"] = driver.page_source[:2000]
    finally:
        driver.quit()
    print(json.dumps(seen))
    """#

@Suite("The account page in headless Chromium", .serialized)
struct AccountPageBrowserTests {
    static var hasBrowser: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver")
    }

    @Test(
        "sign in by approving with keyauth approve, approve a pending device, revoke it, refuse a cross-site post, sign out",
        .enabled(if: hasBrowser, "chromium and chromium-driver are not installed"))
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
        func keyauth(_ home: TemporaryDirectory, _ arguments: [String]) throws -> CommandResult {
            try runProcess(
                Binaries.keyauth, arguments,
                environment: ["KEYAUTH_HOME": home.path, "HOME": home.path, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"])
        }
        let register = ["register", "--server", server.url, "--user", "alice", "--bits", "2048", "--presence", "none"]
        try #require(try keyauth(laptop, register + ["--name", "laptop"]).status == 0)
        try #require(try keyauth(phone, register + ["--name", "phone", "--no-wait"]).status == 0)
        let status = try JSONValue(parsing: try keyauth(phone, ["status", "--json"]).standardOutput)
        let phoneKID = try #require(status["accounts"]?.arrayValue?.first?["kid"]?.stringValue)

        let output = Self.outputDirectory()
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let screenshot = output + "/account-page.png"
        try? FileManager.default.removeItem(atPath: screenshot)
        let script = directory.path + "/browser.py"
        try browserScript.write(toFile: script, atomically: true, encoding: .utf8)
        let run = try runProcess(
            "/usr/bin/python3", [script, server.url, Binaries.keyauth, laptop.path, phoneKID, screenshot],
            environment: ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": directory.path], timeout: 180)
        let printed = run.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        try #require(!printed.isEmpty, "\(run.standardError)")
        let seen = try JSONValue(parsing: printed)
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
        #expect(seen["after_approve"] == .string("active"))
        #expect(seen["after_revoke"] == .string("revoked"))
        #expect(seen["cross_site_page"]?.stringValue?.contains("Refused") == true)
        #expect(seen["still_signed_in"] == .bool(true))
        #expect(seen["signed_out"] == .bool(true))
        let attributes = try FileManager.default.attributesOfItem(atPath: screenshot)
        #expect((attributes[.size] as? Int ?? 0) > 10_000)
    }

    /// Where the test leaves its screenshot: `KEYAUTH_TEST_OUTPUT`, or `test-output` beside the
    /// build products.
    static func outputDirectory() -> String {
        if let directory = ProcessInfo.processInfo.environment["KEYAUTH_TEST_OUTPUT"] { return directory }
        return URL(fileURLWithPath: Binaries.keyauth).deletingLastPathComponent().appendingPathComponent(
            "test-output"
        ).path
    }
}
