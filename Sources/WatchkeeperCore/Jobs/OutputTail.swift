/// The last lines a run wrote through the daemon, stdout and stderr interleaved in the
/// order the daemon read them, for its `on_failure` or `on_success` hook. Kept only for
/// runs whose job has a hook (a ring per run costs memory), and bounded: at most
/// `capacity` lines of at most `maxLineBytes` bytes each. Confined to the jobs queue.
// @unchecked Sendable: confined to the jobs queue.
final class OutputTail: @unchecked Sendable {
    /// How many of the run's last lines its hook gets (docs/configuration.md).
    static let capacity = 100
    /// A longer line (the daemon already cuts lines at 16 KiB) is cut to its first 4 KiB
    /// here: 100 lines cost at most 400 KiB per run.
    static let maxLineBytes = 4_096

    private var ring: [[UInt8]] = []
    /// Where the oldest line is once the ring is full.
    private var oldest = 0

    /// `line` is lent for the call only, as LineSplitter hands it out. Once the ring is
    /// full, the oldest line's storage is reused: output is the daemon's hot path.
    func append(_ line: UnsafeBufferPointer<UInt8>) {
        let kept = UnsafeBufferPointer(rebasing: line[0..<min(line.count, Self.maxLineBytes)])
        if ring.count < Self.capacity {
            ring.append(Array(kept))
        } else {
            ring[oldest].removeAll(keepingCapacity: true)
            ring[oldest].append(contentsOf: kept)
            oldest = (oldest + 1) % Self.capacity
        }
    }

    var count: Int { ring.count }

    /// Oldest first, each line ended by a newline.
    var bytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(ring.reduce(0) { $0 + $1.count + 1 })
        for index in 0..<ring.count {
            out += ring[(oldest + index) % ring.count]
            out.append(UInt8(ascii: "\n"))
        }
        return out
    }
}
