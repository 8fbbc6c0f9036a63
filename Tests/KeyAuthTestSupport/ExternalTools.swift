import Foundation

/// Whether tests that need programs from outside the package (Chromium, Apache, Authlib) may be
/// skipped when those are missing.
///
/// On a developer's machine without them such a test is skipped, saying which package is
/// missing. CI (`.ci/run`) sets `KEYAUTH_TEST_REQUIRE_TOOLS=1` after installing them: there a
/// missing program fails the test instead, so that a broken installation cannot pass as skipped.
public enum ExternalTools {
    /// True when `KEYAUTH_TEST_REQUIRE_TOOLS=1`.
    public static var areRequired: Bool { ProcessInfo.processInfo.environment["KEYAUTH_TEST_REQUIRE_TOOLS"] == "1" }

    /// Whether a test needing tools that are `installed` runs: when they are, or when CI requires them.
    public static func shouldRun(installed: Bool) -> Bool { installed || areRequired }
}
