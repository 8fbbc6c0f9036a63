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

    @Test("a row with more cells than the header prints them two spaces apart instead of trapping")
    func rowWiderThanHeader() {
        var table = TextTable(header: ["ID"])
        table.rows = [["1", "extra", "more"]]
        #expect(table.rendered == "ID\n1   extra  more\n")
    }
}
