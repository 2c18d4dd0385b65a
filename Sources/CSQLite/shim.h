#ifndef WATCHKEEPER_CSQLITE_SHIM_H
#define WATCHKEEPER_CSQLITE_SHIM_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is the pointer value -1 cast to a function pointer, a macro Swift
// cannot import: this binds text that SQLite copies before the call returns, so the
// Swift buffer only has to live for the call.
static inline int wk_sqlite3_bind_text_copied(sqlite3_stmt *statement, int index, const char *text, int length) {
    return sqlite3_bind_text(statement, index, text, length, SQLITE_TRANSIENT);
}

static inline int wk_sqlite3_bind_blob_copied(sqlite3_stmt *statement, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(statement, index, bytes, length, SQLITE_TRANSIENT);
}

#endif
