/// A spawn's argv and envp, written as C strings into one buffer that lives as long as its
/// owner and is reused by each of its spawns: a job's values (its path, run ID, deadline)
/// are written into storage that is already there, rather than into an array per argument
/// and per variable that is then copied again into C strings, on the way to its exec
/// (docs/measurements/latency-path.md). The jobs queue owns one (JobContext); a
/// `SpawnRequest` built from arrays gets one of its own.
///
/// The environment follows JobEnvironment's rule: the shared entries first, less those a
/// job's own variable replaces, then the job's own, the last of a name winning.
// @unchecked Sendable: used by one queue at a time (the jobs queue for the shared one), and
// only between the start of a spawn request and the spawn's return.
final class SpawnStrings: @unchecked Sendable {
    private var bytes: [UInt8] = []
    private var argumentStarts: [Int] = []
    private var ownEntries: [(start: Int, nameEnd: Int)] = []
    /// The environment in envp order, once finished.
    private var entryStarts: [Int] = []
    private var pointers: [UnsafeMutablePointer<CChar>?] = []
    private var openArgument: Int?
    /// The first argument and environment entry holding a NUL byte, which cannot be passed.
    private(set) var argumentWithNUL: Int?
    private(set) var entryWithNUL: Int?
    private var ownWithNUL: Int?

    init() {}

    /// From ready-made arrays (SpawnRequest's), in their order.
    convenience init(arguments: [[UInt8]], environment: [[UInt8]]) {
        self.init()
        for argument in arguments { append(argument: argument) }
        for entry in environment {
            if entryWithNUL == nil, entry.contains(0) { entryWithNUL = entryStarts.count }
            entryStarts.append(bytes.count)
            bytes.append(contentsOf: entry)
            bytes.append(0)
        }
    }

    /// Empty again, keeping the storage.
    func reset() {
        bytes.removeAll(keepingCapacity: true)
        argumentStarts.removeAll(keepingCapacity: true)
        ownEntries.removeAll(keepingCapacity: true)
        entryStarts.removeAll(keepingCapacity: true)
        openArgument = nil
        argumentWithNUL = nil
        entryWithNUL = nil
        ownWithNUL = nil
    }

    // MARK: Arguments

    func startArgument() {
        openArgument = bytes.count
    }

    func append<Bytes: Collection>(_ part: Bytes) where Bytes.Element == UInt8 {
        bytes.append(contentsOf: part)
    }

    func appendDecimal(_ value: Int) {
        bytes.append(contentsOf: String(value).utf8)
    }

    func appendISO8601(_ time: WallTime) {
        time.appendISO8601(to: &bytes)
    }

    /// The bytes written since `startArgument`, as one argument.
    func endArgument() {
        guard let start = openArgument else { return }
        openArgument = nil
        if argumentWithNUL == nil, bytes[start...].contains(0) { argumentWithNUL = argumentStarts.count }
        argumentStarts.append(start)
        bytes.append(0)
    }

    func append<Bytes: Collection>(argument: Bytes) where Bytes.Element == UInt8 {
        startArgument()
        append(argument)
        endArgument()
    }

    var argumentCount: Int { argumentStarts.count }

    /// argv[0]'s bytes.
    var program: ArraySlice<UInt8>? {
        argumentStarts.first.map { bytes[$0..<bytes[$0...].firstIndex(of: 0)!] }
    }

    // MARK: Environment

    /// One of the job's own variables; `value` writes its value (`append`, `appendDecimal`).
    func addOwn(_ name: String, value: (SpawnStrings) -> Void) {
        let start = bytes.count
        bytes.append(contentsOf: name.utf8)
        let nameEnd = bytes.count
        bytes.append(UInt8(ascii: "="))
        value(self)
        if ownWithNUL == nil, bytes[start...].contains(0) { ownWithNUL = ownEntries.count }
        ownEntries.append((start, nameEnd))
        bytes.append(0)
    }

    func addOwn<Bytes: Collection>(_ name: String, _ value: Bytes) where Bytes.Element == UInt8 {
        addOwn(name) { $0.append(value) }
    }

    /// Puts the environment in its order: `shared`'s entries that no own variable replaces,
    /// then the own variables that no later one of the same name replaces.
    func finishEnvironment(shared: JobEnvironment?) {
        // Worked on as locals and put back once: every access to a class's stored property
        // is checked for exclusivity at run time, which in these loops was once per entry
        // and per comparison: 39 % of the call's instructions (latency-path.md).
        var bytes = self.bytes, starts = entryStarts
        self.bytes = []
        entryStarts = []
        let own = ownEntries, ownWithNUL = self.ownWithNUL
        var withNUL: Int?
        starts.removeAll(keepingCapacity: true)
        if let shared {
            let base = bytes.count
            bytes.append(contentsOf: shared.block)
            for entry in shared.entries
            where !Self.replaced(base + entry.start, nameLength: entry.nameLength, after: -1, own: own, in: bytes) {
                if withNUL == nil, entry.hasNUL { withNUL = starts.count }
                starts.append(base + entry.start)
            }
        }
        for (index, entry) in own.enumerated()
        where !Self.replaced(entry.start, nameLength: entry.nameEnd - entry.start, after: index, own: own, in: bytes) {
            if withNUL == nil, index == ownWithNUL { withNUL = starts.count }
            starts.append(entry.start)
        }
        self.bytes = bytes
        entryStarts = starts
        entryWithNUL = withNUL
    }

    /// Whether an own variable after `after` has the name at `start`.
    private static func replaced(_ start: Int, nameLength: Int, after: Int, own: [(start: Int, nameEnd: Int)], in bytes: [UInt8]) -> Bool {
        var index = after + 1
        while index < own.count {
            let entry = own[index]
            if entry.nameEnd - entry.start == nameLength, bytes[entry.start..<entry.nameEnd].elementsEqual(bytes[start..<(start + nameLength)]) {
                return true
            }
            index += 1
        }
        return false
    }

    var environmentCount: Int { entryStarts.count }

    /// The environment's entries, in order ("KEY=value", no NUL).
    var environment: [[UInt8]] {
        entryStarts.map { Array(bytes[$0..<bytes[$0...].firstIndex(of: 0)!]) }
    }

    /// The arguments, in order.
    var arguments: [[UInt8]] {
        argumentStarts.map { Array(bytes[$0..<bytes[$0...].firstIndex(of: 0)!]) }
    }

    /// The value of PATH in the environment, if it has one.
    var searchPath: [UInt8]? {
        let prefix = Array("PATH=".utf8)
        for start in entryStarts where bytes[start...].starts(with: prefix) {
            return Array(bytes[(start + prefix.count)..<bytes[start...].firstIndex(of: 0)!])
        }
        return nil
    }

    // MARK: C strings

    /// `body` gets the executable's path (`path`, or argv[0] when nil), argv and envp, valid
    /// only while it runs.
    func withCStrings<Result>(path: [UInt8]?,
                              _ body: (UnsafePointer<CChar>, UnsafePointer<UnsafeMutablePointer<CChar>?>,
                                       UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result) -> Result {
        var pathStart = argumentStarts.first ?? 0
        if let path {
            pathStart = bytes.count
            bytes.append(contentsOf: path)
            bytes.append(0)
        }
        if bytes.isEmpty { bytes.append(0) }
        // Read-only access: a mutable one copied the whole buffer whenever a slice of it was
        // still held (the spawner's argv[0]), an allocation per spawn. Nothing writes to them.
        return bytes.withUnsafeBufferPointer { buffer in
            let base = UnsafeMutablePointer(mutating: UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self))
            pointers.removeAll(keepingCapacity: true)
            for start in argumentStarts { pointers.append(base + start) }
            pointers.append(nil)
            for start in entryStarts { pointers.append(base + start) }
            pointers.append(nil)
            let environmentAt = argumentStarts.count + 1
            return pointers.withUnsafeBufferPointer { table in
                body(UnsafePointer(base + pathStart), table.baseAddress!, table.baseAddress! + environmentAt)
            }
        }
    }
}
