import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// Headless Chromium driven over WebDriver by Debian's python3-selenium, for the browser tests.
///
/// A test writes the steps as a Python function `steps(arguments)` that records what it saw in
/// the dictionary `seen`; this wraps it with the browser's start, helpers, and an ending that
/// records a failure with the page and URL it happened on, quits the browser, and prints `seen`
/// as one JSON line.
enum HeadlessChromium {
    /// Whether Chromium and its WebDriver are installed; the tests say so when they are not.
    static var isInstalled: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver")
    }

    /// What the steps find defined: `driver`, `wait` (60 s, looking again while a reload
    /// replaces the page), `seen`, `button(text, scope)` and `run_keyauth(binary, home, arguments, input)`.
    private static let preamble = #"""
        import json, subprocess, sys, tempfile, time, urllib.request
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.common.exceptions import WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        seen = {}
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--user-data-dir=" + tempfile.mkdtemp(prefix="keyauth-chromium-")]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
        # A form's answer reloads the page: an element found before it goes stale, and a look
        # while the page is replaced can fail with a bare WebDriverException (seen in CI on a
        # loaded machine, just after a 303), so look again; a page that never comes still
        # ends the wait with its timeout.
        wait = WebDriverWait(driver, 60, ignored_exceptions=[WebDriverException])

        def button(text, scope=None):
            for candidate in (scope or driver).find_elements(By.TAG_NAME, "button"):
                if candidate.text.strip() == text:
                    return candidate
            return None

        def run_keyauth(binary, home, arguments, input=""):
            return subprocess.run([binary] + arguments, input=input, capture_output=True, text=True, timeout=60,
                                  env={"KEYAUTH_HOME": home, "HOME": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})

        """#

    private static let ending = #"""

        try:
            steps(sys.argv[1:])
        except Exception as error:
            seen["failure"] = repr(error)
            seen["url"] = driver.current_url
            seen["page"] = driver.page_source[:3000]
        finally:
            driver.quit()
        print(json.dumps(seen))
        """#

    /// Runs `steps` in Chromium with `arguments` and returns what it recorded.
    ///
    /// - Parameters:
    ///   - steps: Python source defining `steps(arguments)`.
    ///   - directory: where the script is written; the browser's home.
    static func run(_ steps: String, arguments: [String], in directory: String) throws -> JSONValue {
        try runPythonScript(preamble + steps + ending, arguments: arguments, in: directory)
    }

    /// Where tests leave screenshots: `KEYAUTH_TEST_OUTPUT`, or `test-output` beside the build
    /// products.
    static func outputDirectory() -> String {
        if let directory = ProcessInfo.processInfo.environment["KEYAUTH_TEST_OUTPUT"] { return directory }
        return URL(fileURLWithPath: Binaries.keyauth).deletingLastPathComponent().appendingPathComponent(
            "test-output"
        ).path
    }
}
