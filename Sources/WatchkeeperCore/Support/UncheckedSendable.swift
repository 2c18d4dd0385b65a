/// A value handed to another queue whose owner alone uses it (a completion handler that
/// runs only on its reply queue).
// @unchecked Sendable: the value is used only on the queue it is handed to.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
