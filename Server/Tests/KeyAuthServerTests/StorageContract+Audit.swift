import Testing

@testable import KeyAuthServer

extension StorageContract {
    static func keepsAuditEvents(_ database: StorageContractDatabase) throws {
        let storage = try database.open()
        defer { storage.close() }
        let events = [
            AuditEvent(time: 100, action: .enroll, actor: "admin", user: "alice"),
            AuditEvent(
                time: 200, action: .approve, actor: "device:kid-1", user: "alice", subject: "kid-2", detail: "laptop"),
            // Same second: the order recorded, not the text.
            AuditEvent(time: 200, action: .revoke, actor: "admin", user: "alice", subject: "kid-1"),
            AuditEvent(time: 200, action: .addClient, actor: "admin", subject: "https://app.example"),
            AuditEvent(time: 300, action: AuditAction(rawValue: "future-action"), actor: "admin"),
        ]
        for event in events { try storage.insertAuditEvent(event) }
        #expect(try storage.auditEvents(since: 0) == events)
        #expect(try storage.auditEvents(since: 200) == Array(events[1...]))
        #expect(try storage.auditEvents(since: 201) == [events[4]])
        #expect(try storage.auditEvents(since: 301).isEmpty)
    }
}
