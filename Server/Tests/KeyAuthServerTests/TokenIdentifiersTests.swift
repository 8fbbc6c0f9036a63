import Foundation
import Testing

@testable import KeyAuthServer

@Suite("Token identifiers cut from blocks of random bytes")
struct TokenIdentifiersTests {
    @Test("identifiers are 16 bytes and never repeat, across hundreds of block ends")
    func distinctAcrossBlocks() throws {
        // Four identifiers a block: 1,000 identifiers cross 249 block ends.
        let source = TokenIdentifiers(blockLength: 64)
        var seen = Set<[UInt8]>()
        for _ in 0..<1000 {
            let identifier = try source.next()
            #expect(identifier.count == TokenIdentifiers.length)
            #expect(seen.insert(identifier).inserted)
        }
        // 16,000 bytes that are not one repeated value.
        #expect(Set(seen.joined()).count > 200)
    }

    @Test("a block shorter than one identifier still yields whole identifiers")
    func tinyBlock() throws {
        let source = TokenIdentifiers(blockLength: 5)
        let first = try source.next()
        let second = try source.next()
        #expect(first.count == 16 && second.count == 16)
        #expect(first != second)
    }

    @Test("threads sharing one source never receive the same identifier")
    func concurrentCallers() throws {
        let source = TokenIdentifiers(blockLength: 128)
        let perThread = 500
        let collected = Array(repeating: [[UInt8]](), count: 4)
        let results = LockedResults(collected)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            var mine: [[UInt8]] = []
            for _ in 0..<perThread { if let identifier = try? source.next() { mine.append(identifier) } }
            results.set(thread, mine)
        }
        let all = results.values.flatMap { $0 }
        #expect(all.count == 4 * perThread)
        #expect(Set(all).count == all.count)
    }
}

/// Per-thread results written under a lock, read after `concurrentPerform` returns.
private final class LockedResults: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [[[UInt8]]]
    init(_ initial: [[[UInt8]]]) { stored = initial }
    func set(_ index: Int, _ value: [[UInt8]]) { lock.withLock { stored[index] = value } }
    var values: [[[UInt8]]] { lock.withLock { stored } }
}
