import Foundation
import KeyAuthTestSupport
import Testing

extension StorageContractTests {
    /// The token-confusion audit (``TokenConfusionTests``) across two `keyauth-server` instances
    /// on one PostgreSQL database: every token, code and proof one instance gives is offered to
    /// the other, where the next request of a client behind a load balancer may land, for what
    /// it is and for every other purpose. Nested in ``StorageContractTests`` to share its
    /// `.serialized` trait (its outage test stops the PostgreSQL server); reported as skipped
    /// when `KEYAUTH_TEST_POSTGRES_URL` is unset.
    @Suite("Token confusion: two keyauth-server instances on one PostgreSQL database", .timeLimit(.minutes(10)))
    struct TokenConfusionPostgresTests {
        @Test(
            "each token kind one instance issues is refused by the other where another kind is expected",
            .enabled(
                if: PostgresTestServer.url != nil,
                "KEYAUTH_TEST_POSTGRES_URL is not set; run `eval \"$(sudo .ci/postgres.sh)\"` first"),
            arguments: TokenConfusionCase.allCases)
        func onPostgres(_ check: TokenConfusionCase) async throws {
            // Two of the checks wait minutes for keys to retire: on a thread of their own, so that
            // the serialized chain does not hold a thread of the test pool meanwhile.
            try await DedicatedThreadExecutor.run("confusion-postgres") { try check.run(on: .postgres) }
        }
    }
}
