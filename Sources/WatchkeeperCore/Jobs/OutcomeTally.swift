/// How many of each outcome, per group: the runs of each task or rule by RunOutcome, the
/// hooks of each kind by HookResult. A plain value for the dump.
struct OutcomeTally<Group: Hashable, Outcome: Hashable & CaseIterable & RawRepresentable<String>>: Equatable {
    private var counts: [Group: [Outcome: UInt64]] = [:]

    mutating func add(_ outcome: Outcome, to group: Group) {
        counts[group, default: [:]][outcome, default: 0] += 1
    }

    subscript(group: Group, outcome: Outcome) -> UInt64 { counts[group]?[outcome] ?? 0 }

    /// Every group counted so far.
    var groups: Dictionary<Group, [Outcome: UInt64]>.Keys { counts.keys }

    /// The outcomes of `group` that happened at least once, in their declared order.
    func describe(_ group: Group) -> DumpValue {
        .object(Outcome.allCases.compactMap { outcome in
            counts[group]?[outcome].map { .init(outcome.rawValue, .int(Int64($0))) }
        })
    }
}
