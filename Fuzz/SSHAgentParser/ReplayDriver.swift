// In an ordinary build, `keyauth-fuzz-ssh-agent FILE|DIRECTORY...` runs each input once through
// the harness and exits non-zero when one breaks an invariant, so the seeds and findings stay
// regression tests without libFuzzer; `keyauth-fuzz-ssh-agent --write-seeds DIRECTORY` writes
// the seeds of Fuzz/ssh-agent-corpus.
#if !KEYAUTH_LIBFUZZER
    import Foundation
    import KeyAuthFuzzSupport
    import KeyAuthSSHAgentFuzzing

    @main
    enum ReplayDriver {
        static func main() {
            let arguments = Array(CommandLine.arguments.dropFirst())
            guard !arguments.isEmpty else {
                FileHandle.standardError.write(
                    Data("usage: keyauth-fuzz-ssh-agent FILE|DIRECTORY... | --write-seeds DIRECTORY\n".utf8))
                exit(64)
            }
            do {
                let harness = try SSHAgentFuzzHarness()
                if arguments.first == "--write-seeds", arguments.count == 2 {
                    for (name, bytes) in try harness.seeds() {
                        try Data(bytes).write(to: URL(fileURLWithPath: arguments[1] + "/" + name))
                    }
                    exit(0)
                }
                exit(FuzzInputs.replay(arguments, name: "keyauth-fuzz-ssh-agent", check: harness.run))
            } catch {
                FileHandle.standardError.write(Data("keyauth-fuzz-ssh-agent: \(error)\n".utf8))
                exit(70)
            }
        }
    }
#endif
