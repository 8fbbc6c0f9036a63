import Testing

@testable import KeyAuthServer

@Suite("The admin commands' tables")
struct TextTableTests {
    @Test("columns are aligned two spaces apart, the last unpadded, an empty cell is -, control characters are ?")
    func rendering() {
        var table = TextTable(header: ["ID", "USER", "NAME"])
        table.rows = [["1", "alice", "work laptop"], ["22", "", "line\nbreak\u{1B}[2J"]]
        #expect(
            table.rendered == """
                ID  USER   NAME
                1   alice  work laptop
                22  -      line?break?[2J

                """)
    }
}
