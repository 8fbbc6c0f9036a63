import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Chromium's side, run by ``HeadlessChromium``: it opens the relying party's protected page,
/// signs in on keyauth-server's page while the laptop lists and approves the request, reads the
/// module's session info, signs in again with the module's cookie gone (keyauth-server's session
/// answers, no approval), logs out through the module, and visits once more.
private let browserSteps = #"""
    import urllib.parse

    def steps(arguments):
        app, provider, keyauth, laptop_home, screenshot = arguments
        def on_sign_in_page(d):
            return d.current_url.startswith(provider + "/") and d.find_elements(By.NAME, "user")
        def on_protected_page(d):
            return d.current_url.startswith(app + "/protected/") and d.find_elements(By.ID, "user")
        def open_protected_page():
            # A link on the application's page: the browser's own navigations count as same-site.
            driver.get(app + "/")
            driver.find_element(By.ID, "open").click()
        open_protected_page()
        wait.until(on_sign_in_page)
        seen["sign_in_url"] = driver.current_url
        seen["sign_in_page"] = driver.find_element(By.TAG_NAME, "body").text
        user = driver.find_element(By.NAME, "user")
        user.send_keys("alice")
        user.submit()
        code = wait.until(lambda d: d.find_element(By.ID, "binding-code")).text.strip()
        seen["code"] = code
        listed = run_keyauth(keyauth, laptop_home, ["requests"])
        seen["requests"] = listed.stdout + listed.stderr
        approval = run_keyauth(keyauth, laptop_home, ["approve", "--pin-stdin"], code + "\n")
        seen["approve_status"] = approval.returncode
        seen["approve_output"] = approval.stdout + approval.stderr
        wait.until(on_protected_page)
        seen["signed_in_url"] = driver.current_url
        seen["page_user"] = driver.find_element(By.ID, "user").text
        seen["page_sub"] = driver.find_element(By.ID, "sub").text
        driver.save_screenshot(screenshot)
        driver.get(app + "/protected/redirect_uri?info=json")
        seen["info"] = json.loads(driver.find_element(By.TAG_NAME, "body").text)

        # Without the module's session, its next request to keyauth-server is a cross-site
        # navigation: keyauth-server's session cookie must come along and answer without approval.
        for cookie in driver.get_cookies():
            if cookie["name"].startswith("mod_auth_openidc_session"):
                driver.delete_cookie(cookie["name"])
        open_protected_page()
        wait.until(lambda d: on_protected_page(d) or on_sign_in_page(d))
        seen["again_without_approval"] = bool(on_protected_page(driver))
        seen["again_user"] = driver.find_element(By.ID, "user").text if on_protected_page(driver) else None

        if on_protected_page(driver):
            driver.find_element(By.ID, "logout").click()
        else:
            driver.get(app + "/protected/redirect_uri?logout=" + urllib.parse.quote(app + "/signed-out.html", safe=""))
        wait.until(lambda d: d.current_url.startswith(app + "/signed-out.html") and d.find_elements(By.ID, "signed-out"))
        seen["after_logout_url"] = driver.current_url
        open_protected_page()
        wait.until(lambda d: on_protected_page(d) or on_sign_in_page(d))
        seen["after_logout_needs_approval"] = bool(on_sign_in_page(driver))
    """#

@Suite(
    "A real relying party: Apache's mod_auth_openidc signs in through keyauth-server in Chromium", .serialized,
    .timeLimit(.minutes(15)))
struct RelyingPartyBrowserTests {
    static var isEnabled: Bool {
        ExternalTools.shouldRun(installed: HeadlessChromium.isInstalled && ApacheRelyingParty.isInstalled)
    }

    @Test(
        "the protected page needs an approval with keyauth approve that names the application, the module's session is the user, logout ends keyauth's session too",
        .enabled(
            if: isEnabled, "chromium, chromium-driver, apache2 or libapache2-mod-auth-openidc is not installed"))
    func signInThroughApache() throws {
        let directory = TemporaryDirectory("keyauth-relying-party")
        defer { directory.remove() }
        let server = try KeyAuthServerProcess.started(in: directory.path)
        defer { _ = server.terminate() }
        let laptop = Machine()
        defer { laptop.home.remove() }
        try #require(try laptop.register(server, user: "alice", extra: ["--name", "laptop"]).status == 0)
        let wiki = try ApacheRelyingParty(
            name: "Team wiki", provider: server, database: directory.path + "/server.db")

        let output = HeadlessChromium.outputDirectory()
        try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
        let screenshot = output + "/relying-party.png"
        let seen = try HeadlessChromium.run(
            browserSteps, arguments: [wiki.url, server.url, Binaries.keyauth, laptop.home.path, screenshot],
            in: directory.path)
        let context = "\(seen)\n\(wiki.apache.diagnostics)\n\(server.log)"
        #expect(seen["failure"] == nil, "\(context)")
        // The sign-in page is keyauth-server's, another site than the application's, and names it.
        #expect(seen["sign_in_url"]?.stringValue?.hasPrefix(server.url + "/") == true)
        #expect(seen["sign_in_page"]?.stringValue?.contains("Team wiki") == true, "\(context)")
        // The device shows who asks and where the browser goes back to before approving: on
        // loopback with the port, which tells the programs of one machine apart.
        let requests = seen["requests"]?.stringValue ?? ""
        #expect(requests.contains("Team wiki (redirects to localhost:"), "\(requests)")
        let approval = seen["approve_output"]?.stringValue ?? ""
        #expect(seen["approve_status"] == .integer(0), "\(approval)")
        #expect(approval.contains("application: Team wiki (redirects to localhost:"), "\(approval)")
        // Apache's page and the module's session are alice's, from an ID token for this client.
        #expect(seen["signed_in_url"]?.stringValue?.hasPrefix(wiki.protectedURL) == true)
        #expect(seen["page_user"] == .string("alice"))
        #expect(seen["page_sub"] == .string("alice"))
        let info = seen["info"]
        #expect(info?["remote_user"] == .string("alice"), "\(context)")
        #expect(info?["id_token"]?["sub"] == .string("alice"))
        #expect(info?["id_token"]?["iss"] == .string(server.url))
        #expect(info?["id_token"]?["aud"] == .string(wiki.clientID))
        #expect(info?["id_token"]?["nonce"]?.stringValue?.isEmpty == false)
        // keyauth-server's session signs in again without an approval until logout ends it.
        #expect(seen["again_without_approval"] == .bool(true), "\(context)")
        #expect(seen["again_user"] == .string("alice"))
        #expect(seen["after_logout_url"]?.stringValue?.hasPrefix(wiki.signedOutURL) == true)
        #expect(seen["after_logout_needs_approval"] == .bool(true), "\(context)")
    }
}
