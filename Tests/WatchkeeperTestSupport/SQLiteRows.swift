#if canImport(XCTest)
import CSQLite
import Foundation

/// Column `column` of every row `sql` gives, as text ("NULL" for a null), read through a
/// connection of the test's own, as another process would see the file, not through the
/// code under test. `flags` are sqlite3_open_v2's.
public func queryRows(
    _ sql: String, database path: String, column: Int32 = 0, flags: Int32 = SQLITE_OPEN_READWRITE
) throws -> [String] {
    var connection: OpaquePointer?
    defer { sqlite3_close(connection) }
    func failure(_ code: Int32) -> NSError {
        NSError(domain: "sqlite", code: Int(code), userInfo: [NSLocalizedDescriptionKey: String(cString: sqlite3_errmsg(connection))])
    }
    let opened = sqlite3_open_v2(path, &connection, flags, nil)
    guard opened == SQLITE_OK else { throw failure(opened) }
    sqlite3_busy_timeout(connection, 5_000)
    var statement: OpaquePointer?
    let prepared = sqlite3_prepare_v2(connection, sql, -1, &statement, nil)
    guard prepared == SQLITE_OK else { throw failure(prepared) }
    defer { sqlite3_finalize(statement) }
    var rows: [String] = []
    while true {
        let code = sqlite3_step(statement)
        if code == SQLITE_DONE { return rows }
        guard code == SQLITE_ROW else { throw failure(code) }
        rows.append(sqlite3_column_text(statement, column).map { String(cString: $0) } ?? "NULL")
    }
}
#endif
