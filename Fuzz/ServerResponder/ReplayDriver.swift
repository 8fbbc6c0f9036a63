// In an ordinary build, `keyauth-fuzz-server FILE|DIRECTORY...` runs each input once through the
// fuzz harness and exits non-zero when one breaks an invariant: how the seeds and the findings
// in Fuzz/server-findings/ stay regression tests without libFuzzer. `KEYAUTH_FUZZ_VERBOSE=1`
// prints each request's status.
#if !KEYAUTH_LIBFUZZER
    import Foundation
    import KeyAuthServerFuzzing

    @main
    enum ReplayDriver {
        static func main() {
            let paths = Array(CommandLine.arguments.dropFirst())
            if paths.isEmpty {
                FileHandle.standardError.write(Data("usage: keyauth-fuzz-server FILE|DIRECTORY...\n".utf8))
                exit(64)
            }
            do {
                let harness = try ServerFuzzHarness()
                harness.verbose = ProcessInfo.processInfo.environment["KEYAUTH_FUZZ_VERBOSE"] == "1"
                var failed = 0
                let files = try ServerFuzzHarness.inputFiles(paths)
                for file in files {
                    if harness.verbose { FileHandle.standardError.write(Data("\(file)\n".utf8)) }
                    let violations = harness.run(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
                    if !violations.isEmpty {
                        failed += 1
                        print("FAIL \(file)\n  " + violations.joined(separator: "\n  "))
                    }
                }
                print("keyauth-fuzz-server: \(files.count) inputs, \(failed) broke an invariant")
                exit(failed == 0 ? 0 : 1)
            } catch {
                FileHandle.standardError.write(Data("keyauth-fuzz-server: \(error)\n".utf8))
                exit(70)
            }
        }
    }
#endif
