// In an ordinary build, `keyauth-fuzz-binary FILE|DIRECTORY...` runs each input once through
// the binary-parser harness and exits non-zero when one breaks an invariant, so the seeds and the
// findings stay regression tests without libFuzzer. `KEYAUTH_FUZZ_VERBOSE=1` prints each
// input's mode and whether it was accepted.
#if !KEYAUTH_LIBFUZZER
    import Foundation
    import KeyAuthBinaryFuzzing

    @main
    enum ReplayDriver {
        static func main() {
            let verbose = ProcessInfo.processInfo.environment["KEYAUTH_FUZZ_VERBOSE"] == "1"
            var files: [String] = []
            for path in CommandLine.arguments.dropFirst() {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path))?.sorted()
                files += names.map { $0.filter { !$0.hasPrefix(".") }.map { path + "/" + $0 } } ?? [path]
            }
            guard !files.isEmpty else {
                FileHandle.standardError.write(Data("usage: keyauth-fuzz-binary FILE|DIRECTORY...\n".utf8))
                exit(64)
            }
            var failed = 0
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else {
                    FileHandle.standardError.write(Data("keyauth-fuzz-binary: cannot read \(file)\n".utf8))
                    exit(66)
                }
                let outcome = BinaryParserHarness.check(Array(data))
                if verbose {
                    let mode = outcome.mode.map { "\($0)" } ?? "empty"
                    print("\(file): \(mode), \(outcome.accepted ? "accepted" : "refused")")
                }
                if !outcome.violations.isEmpty {
                    failed += 1
                    print("FAIL \(file)\n  " + outcome.violations.joined(separator: "\n  "))
                }
            }
            print("keyauth-fuzz-binary: \(files.count) inputs, \(failed) broke an invariant")
            exit(failed == 0 ? 0 : 1)
        }
    }
#endif
