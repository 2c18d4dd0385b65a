/// Who waits for which reload, on the lifecycle queue. One reload runs at a time; a
/// SIGHUP during it asks for one more after it. A `watchkeeper reload` caller is answered
/// by a reload that read the file after its call: the one starting now, or, if one is
/// already reading, the one after it.
struct ReloadRequests {
    private(set) var inProgress = false
    private var again = false
    /// Answered by the reload in progress (or starting now).
    private var waiting: [ControlReply] = []
    /// Answered by the reload after it.
    private var next: [ControlReply] = []

    /// A caller who wants the result of the next reload to read the file.
    mutating func wait(_ reply: @escaping ControlReply) {
        if inProgress { next.append(reply) } else { waiting.append(reply) }
    }

    /// A reload is asked for: true when it starts now; false when one is reading, and
    /// another follows it.
    mutating func begin() -> Bool {
        guard !inProgress else {
            again = true
            return false
        }
        inProgress = true
        return true
    }

    /// The reload ended: the callers its result answers, and whether another was asked
    /// for meanwhile (it starts with `begin`).
    mutating func finished() -> (answered: [ControlReply], again: Bool) {
        inProgress = false
        let answered = waiting
        waiting = next
        next = []
        let again = self.again
        self.again = false
        return (answered, again)
    }

    /// The daemon is stopping: everyone still waiting, for this reload or the next.
    mutating func takeAll() -> [ControlReply] {
        let all = waiting + next
        waiting = []
        next = []
        again = false
        return all
    }
}
