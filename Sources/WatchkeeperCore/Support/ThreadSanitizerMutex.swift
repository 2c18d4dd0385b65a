#if WATCHKEEPER_TSAN
#if canImport(Glibc)
import Glibc
#endif

/// `make sanitize` builds for ThreadSanitizer with WATCHKEEPER_TSAN, and this type then
/// stands in for Synchronization's `Mutex` everywhere in the module (a module's own
/// declaration shadows an imported one). ThreadSanitizer sees a lock only through the
/// calls it intercepts; `Mutex` takes its contended path inside libswiftSynchronization,
/// which is not instrumented, so every contended `withLock` was reported as a data race
/// on the value it protects (SourceRegistry's list, first). A pthread mutex is intercepted.
/// Ordinary builds keep `Mutex` (docs/measurements/sync-primitives.md).
// @unchecked Sendable: a lock: its value is touched only under the pthread mutex.
final class Mutex<Value>: @unchecked Sendable {
    private var value: Value
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init(_ initialValue: Value) {
        value = initialValue
        pthread_mutex_init(lock, nil)
    }

    deinit {
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return try body(&value)
    }
}
#endif
