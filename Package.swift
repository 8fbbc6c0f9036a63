// swift-tools-version:6.0
import PackageDescription

/// One package so that a single `swift build` and `swift test` cover the library, the command,
/// the server and the benchmark. C libraries come from Debian's -dev packages through
/// `systemLibrary` targets; no package from outside the toolchain is needed.
let package = Package(
    name: "keyauth",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "KeyAuth", targets: ["KeyAuth"]),
        .executable(name: "keyauth", targets: ["keyauth"]),
        .executable(name: "keyauth-server", targets: ["keyauth-server"]),
        .executable(name: "keyauth-bench", targets: ["keyauth-bench"]),
    ],
    targets: [
        // C at the edges: one module per C library, each imported by exactly one Swift target.
        .systemLibrary(
            name: "CKeyAuthOpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // The client's HTTP transport (libcurl's easy interface; see CurlTransfer).
        .systemLibrary(
            name: "CKeyAuthCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        .systemLibrary(
            name: "CKeyAuthPAM",
            pkgConfig: "pam",
            providers: [.apt(["libpam0g-dev"])]
        ),
        // The TPM Software Stack, for what OpenSSL's tpm2 provider does not expose: the TPM's
        // properties (manufacturer, lockout counters), its supported key sizes, key blob parsing.
        .systemLibrary(
            name: "CKeyAuthTSS2",
            pkgConfig: "tss2-esys",
            providers: [.apt(["libtss2-dev"])]
        ),
        .systemLibrary(
            name: "CKeyAuthMicroHTTPD",
            path: "Server/Sources/CKeyAuthMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "CKeyAuthSQLite",
            path: "Server/Sources/CKeyAuthSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // prctl, which Swift cannot call (it is variadic): keeps `keyauth agent`'s memory from
        // other processes of the same user.
        .systemLibrary(
            name: "CKeyAuthProcess",
            path: "Sources/CKeyAuthProcess"
        ),
        // glibc's malloc_trim, which Swift's Glibc module leaves out (see FreedMemory).
        .systemLibrary(
            name: "CKeyAuthMalloc",
            path: "Server/Sources/CKeyAuthMalloc"
        ),
        .systemLibrary(
            name: "CKeyAuthPQ",
            path: "Server/Sources/CKeyAuthPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),

        // The library that Linux apps embed.
        .target(
            name: "KeyAuth",
            dependencies: ["CKeyAuthCurl", "CKeyAuthOpenSSL", "CKeyAuthPAM", "CKeyAuthTSS2"]
        ),
        // The one argument parser of both commands.
        .target(
            name: "KeyAuthArguments"
        ),
        // The command's logic, as a library so that it is testable with injected I/O.
        .target(
            name: "KeyAuthCLI",
            dependencies: ["KeyAuth", "KeyAuthArguments", "CKeyAuthProcess"]
        ),
        .executableTarget(
            name: "keyauth",
            dependencies: ["KeyAuthCLI"]
        ),

        // The server.
        .target(
            name: "KeyAuthServer",
            dependencies: [
                "KeyAuth", "KeyAuthArguments", "CKeyAuthMicroHTTPD", "CKeyAuthSQLite", "CKeyAuthPQ", "CKeyAuthMalloc",
            ],
            path: "Server/Sources/KeyAuthServer"
        ),
        .executableTarget(
            name: "keyauth-server",
            dependencies: ["KeyAuthServer"],
            path: "Server/Sources/keyauth-server"
        ),

        // Release-mode benchmark: RS256 against `openssl speed`, the server under load, and the
        // server's rate limiter.
        .executableTarget(
            name: "keyauth-bench",
            dependencies: ["KeyAuth", "KeyAuthServer"],
            path: "Benchmarks/keyauth-bench"
        ),

        // An example service that accepts keyauth tokens, for service authors to copy; built
        // by `swift build`, so CI keeps it compiling, and run by the end-to-end tests.
        .executableTarget(
            name: "keyauth-example-service",
            dependencies: ["KeyAuth"],
            path: "Examples/ServiceVerifier"
        ),
        // The library guide's code examples (docs/LIBRARY.md), built by every `swift build` so
        // that they keep compiling; the guide shows these files (a test checks it shows them as
        // they are).
        .executableTarget(
            name: "LoginExample",
            dependencies: ["KeyAuth"],
            path: "Examples/LoginExample"
        ),
        .executableTarget(
            name: "TPMKeyExample",
            dependencies: ["KeyAuth"],
            path: "Examples/TPMKeyExample"
        ),
        .executableTarget(
            name: "AccessTokenCheckExample",
            dependencies: ["KeyAuth"],
            path: "Examples/AccessTokenCheckExample"
        ),
        .executableTarget(
            name: "VerifyAssertionExample",
            dependencies: ["KeyAuth"],
            path: "Examples/VerifyAssertionExample"
        ),

        // The server's whole HTTP surface under fuzzing: the harness as a library (the tests
        // replay the corpus and the findings through it), and an executable that is libFuzzer's
        // target when Fuzz/run-server.sh builds it, else a replay driver.
        // What the fuzz targets share: libFuzzer's entry points and the corpus files.
        .target(
            name: "KeyAuthFuzzSupport",
            path: "Fuzz/Support"
        ),
        .target(
            name: "KeyAuthServerFuzzing",
            dependencies: ["KeyAuth", "KeyAuthServer", "KeyAuthFuzzSupport"],
            path: "Fuzz/ServerHarness"
        ),
        .executableTarget(
            name: "keyauth-fuzz-server",
            dependencies: ["KeyAuthServerFuzzing", "KeyAuthFuzzSupport"],
            path: "Fuzz/ServerResponder"
        ),

        // keyauth agent's ssh-agent message parser under fuzzing, as the server above: the
        // harness as a library (KeyAuthTests replays the corpus through it), and an executable
        // that is libFuzzer's target when Fuzz/run-ssh-agent.sh builds it, else a replay driver.
        .target(
            name: "KeyAuthSSHAgentFuzzing",
            dependencies: ["KeyAuth"],
            path: "Fuzz/SSHAgentHarness"
        ),
        .executableTarget(
            name: "keyauth-fuzz-ssh-agent",
            dependencies: ["KeyAuthSSHAgentFuzzing", "KeyAuthFuzzSupport"],
            path: "Fuzz/SSHAgentParser"
        ),

        // The parsers of binary wire structures under fuzzing (the TPM attestation's, and room for
        // other formats as modes of the same target): the harness as a library the tests replay
        // the corpus through, and an executable that is libFuzzer's target when
        // Fuzz/run-binary.sh builds it, else a replay driver.
        .target(
            name: "KeyAuthBinaryFuzzing",
            dependencies: ["KeyAuth"],
            path: "Fuzz/BinaryHarness"
        ),
        .executableTarget(
            name: "keyauth-fuzz-binary",
            dependencies: ["KeyAuthBinaryFuzzing", "KeyAuthFuzzSupport"],
            path: "Fuzz/BinaryParsers"
        ),

        // Tests.
        // glibc's posix_spawn extensions that its Swift module hides (they need _GNU_SOURCE),
        // for the tests' one way of starting a child process.
        .systemLibrary(
            name: "CKeyAuthSpawn",
            path: "Tests/CKeyAuthSpawn"
        ),
        .target(
            name: "KeyAuthTestSupport",
            dependencies: ["KeyAuth", "CKeyAuthSpawn"],
            path: "Tests/KeyAuthTestSupport"
        ),
        .testTarget(
            name: "KeyAuthTests",
            dependencies: ["KeyAuth", "KeyAuthTestSupport", "KeyAuthSSHAgentFuzzing", "KeyAuthFuzzSupport"]
        ),
        .testTarget(
            name: "KeyAuthCLITests",
            dependencies: [
                "KeyAuthCLI", "KeyAuth", "KeyAuthArguments", "KeyAuthServer", "KeyAuthTestSupport", "CKeyAuthProcess",
            ]
        ),
        .testTarget(
            name: "KeyAuthServerTests",
            dependencies: [
                "KeyAuthServer", "KeyAuth", "KeyAuthTestSupport", "KeyAuthServerFuzzing", "KeyAuthBinaryFuzzing",
            ],
            path: "Server/Tests/KeyAuthServerTests"
        ),
    ]
)
