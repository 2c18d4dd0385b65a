import Dispatch

/// `watchkeeper next`: a task's coming fires as the scheduler performs them, each with what
/// the clocks of its zone show then and a mark when a daylight-saving change moved it or
/// made its wall time happen twice.
///
/// The walk starts from a `FirePreview.Start`, an immutable value: the daemon takes it on
/// the jobs queue (a copy per task, nothing walked there) and walks elsewhere; `next
/// --config FILE` makes it from the file. The marks are found from the zone's rules and
/// the schedule's own next-fire function, not from what the schedule is, so every
/// wall-clock schedule is marked by the same code.
public enum FirePreview {
    /// `systemd-analyze calendar` shows one iteration unless asked; five show a pattern
    /// (weekdays, a monthly date) at a glance.
    public static let defaultCount = 5
    /// A bound on the work one call can ask of the daemon.
    public static let maximumCount = 1_000

    /// Where the walk starts, and what only the daemon knows.
    public struct Start: Sendable {
        public enum Origin: Sendable, Equatable {
            /// Computed from a file, as if the daemon started now.
            case file
            /// The running daemon's armed next fire (jitter included); nil when it has none.
            case daemon(armed: WallTime?)
        }

        public var settings: TaskSettings
        /// The zone a wall-clock schedule is read in (the daemon's, as it loaded it). Nil:
        /// the zone the schedule names, else the machine's local zone, loaded by the walk;
        /// `every` and manual tasks are shown in local time.
        public var zone: TimeZoneRules?
        public var origin: Origin
        public var now: WallTime
        /// This task's jitter delay where it is known exactly: on the daemon's machine, and
        /// for fleet tasks (derived from the name alone) anywhere.
        public var jitterOffset: Duration?
        /// fleet = "one" with a [cluster]: `every` fires on whole intervals since the epoch.
        public var epochAligned: Bool
        /// `next --from`: the fires after this instant, as `systemd-analyze calendar
        /// --base-time` shows them, instead of from now (or the daemon's armed fire).
        public var from: WallTime?

        public init(settings: TaskSettings, zone: TimeZoneRules?, origin: Origin, now: WallTime, jitterOffset: Duration?, epochAligned: Bool,
                    from: WallTime? = nil) {
            self.settings = settings
            self.zone = zone
            self.origin = origin
            self.now = now
            self.jitterOffset = jitterOffset
            self.epochAligned = epochAligned
            self.from = from
        }

        /// From a configuration file (the zone is then the one the task names, loaded by
        /// the walk), with the fleet jitter, which is the same on every host.
        public static func fromFile(_ settings: TaskSettings, clusterConfigured: Bool, now: WallTime) -> Start {
            let fleet = settings.fleet == .one
            return Start(settings: settings, zone: nil, origin: .file, now: now,
                         jitterOffset: fleet || settings.jitter == .zero ? FleetJitter.offset(for: settings) : nil,
                         epochAligned: fleet && clusterConfigured)
        }
    }

    /// What the daylight-saving change did to a fire of a wall-clock schedule.
    public enum Mark: Sendable, Equatable {
        /// The wall time the schedule names was skipped by the clocks (the gap from
        /// `gapStart` to `gapEnd`, wall times); this fire stands in for it.
        case moved(from: LocalDateTime?, gapStart: LocalDateTime, gapEnd: LocalDateTime)
        /// The clocks showed this wall time twice; `occurrence` is 1 or 2, and
        /// `otherFires` says whether the other occurrence is a fire too.
        /// `abbreviations`: what the clocks showed at the first occurrence, then the second.
        case repeated(wall: LocalDateTime, occurrence: Int, otherFires: Bool, abbreviations: [String])

        public var text: String {
            switch self {
            case .moved(let from, let gapStart, let gapEnd):
                // A jump across midnight (Samoa skipped 2011-12-30) needs its dates.
                let sameDay = (gapStart.year, gapStart.month, gapStart.day) == (gapEnd.year, gapEnd.month, gapEnd.day)
                let ends = sameDay ? (Self.clock(gapStart), Self.clock(gapEnd))
                    : (String(gapStart.description.prefix(11)) + Self.clock(gapStart), String(gapEnd.description.prefix(11)) + Self.clock(gapEnd))
                let jump = "the clocks jump from \(ends.0) to \(ends.1)"
                guard let from else { return "moved: \(jump)" }
                return "moved: \(Self.clock(from)) does not exist on this day (\(jump))"
            case .repeated(let wall, let occurrence, let otherFires, let abbreviations):
                let which = "\(Self.clock(wall)) occurs twice on this day (\(abbreviations.joined(separator: ", then ")))"
                if occurrence == 1 {
                    return "repeated: \(which); this is the first" + (otherFires ? ", the second fires too" : ", the second does not fire")
                }
                return "repeated: \(which); this is the second" + (otherFires ? ", the first fired too" : ", the first did not fire")
            }
        }

        public var kind: String {
            if case .moved = self { return "moved" }
            return "repeated"
        }

        /// `02:30`, or `02:30:15` when the seconds matter.
        static func clock(_ time: LocalDateTime) -> String {
            let text = String(time.description.dropFirst(11))
            return time.second == 0 ? String(text.prefix(5)) : text
        }
    }

    public struct Fire: Sendable, Equatable {
        /// When it fires, jitter included where known.
        public var at: WallTime
        public var mark: Mark?
    }

    /// One task's answer.
    public struct Preview: Sendable, Equatable {
        public var task: String
        /// `cron 30 2 * * *`, `every 1h`, `manual`.
        public var schedule: String
        public var zone: TimeZoneRules
        public var notes: [String]
        public var fires: [Fire]

        /// The shape of io.watchkeeper.Control's Next reply, and of `next --json`.
        public var dumpValue: DumpValue {
            .object([
                .init("name", .string(task)),
                .init("schedule", .string(schedule)),
                .init("zone", .string(zone.identifier)),
                .init("notes", .array(notes.map { .string($0) })),
                .init("fires", .array(fires.map { fire in
                    let local = zone.localTime(utcSeconds: fire.at.secondsSinceEpoch)
                    let offset = zone.offset(at: fire.at.secondsSinceEpoch)
                    var text = local.description
                    if fire.at.nanoseconds != 0 { text += "." + String(String(1_000 + fire.at.nanoseconds / 1_000_000).dropFirst()) }
                    return .object([
                        .init("local", .string(text)),
                        .init("weekday", .string(FirePreview.weekdayNames[local.weekday])),
                        .init("abbreviation", .string(offset.abbreviation)),
                        .init("utc_offset", .string(FirePreview.offsetText(offset.offsetSeconds))),
                        .init("utc", .string(fire.at.iso8601)),
                        .init("mark", fire.mark.map { .object([.init("kind", .string($0.kind)), .init("text", .string($0.text))]) } ?? .null),
                    ])
                })),
            ])
        }
    }

    static let weekdayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]

    /// `+02:00`, `-03:30`, `+00:53:28` (local mean time has seconds).
    static func offsetText(_ seconds: Int32) -> String {
        let magnitude = Int(seconds.magnitude)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        var text = (seconds < 0 ? "-" : "+") + two(magnitude / 3_600) + ":" + two(magnitude % 3_600 / 60)
        if magnitude % 60 != 0 { text += ":" + two(magnitude % 60) }
        return text
    }

    // MARK: The walk

    public static func preview(_ start: Start, count requested: Int) -> Preview {
        let count = min(max(requested, 0), maximumCount)
        let settings = start.settings
        // The zone the daemon read the schedule in; else the one the file names; else local
        // time (the scheduler's fallback, as for a zone that did not load, is UTC).
        func zone(named identifier: String?) -> TimeZoneRules {
            start.zone ?? (try? TimeZoneRules.named(identifier)) ?? .utc
        }
        var shownIn: TimeZoneRules
        var notes: [String] = []
        var fires: [Fire] = []
        let schedule: String
        // One case per kind of schedule; a wall-clock schedule only says how to find its
        // next fire after an instant in a zone, and `wallClockFires` does the rest.
        switch settings.schedule {
        case .manual:
            schedule = "manual"
            shownIn = zone(named: nil)
            notes.append("manual: fires only when triggered (watchkeeper trigger)")
        case .every(let interval):
            schedule = "every \(interval.compactDescription)"
            shownIn = zone(named: nil)
            fires = everyFires(start, interval: interval, count: count, notes: &notes)
        case .cron(let expression, let timezone):
            schedule = "cron \(expression.description)"
            shownIn = zone(named: timezone)
            fires = wallClockFires(start, zone: shownIn, count: count, notes: &notes) { expression.nextFire(after: $0, in: $1) }
        case .calendar(let events, let timezone):
            schedule = settings.schedule.wallClockDescription
            // Events that all name one zone are shown in it; the task's zone otherwise.
            let own = Set(events.compactMap(\.timezone))
            if own.count == 1, events.allSatisfy({ $0.zone != nil }), let rules = events.first?.zone {
                shownIn = rules
            } else {
                shownIn = zone(named: timezone)
                if !own.isEmpty { notes.append("events that name their own zone are read in it; the times are shown in \(shownIn.identifier)") }
            }
            let readIn = shownIn
            fires = wallClockFires(start, zone: shownIn, count: count, notes: &notes) { after, zone in
                events.compactMap { event in
                    // Read in the zone asked for (fixed offsets, for the marks) unless the event
                    // names another zone than the one shown.
                    event.zone == nil || event.zone == readIn ? event.nextFire(after: after, readingIn: zone) : event.nextFire(after: after, in: zone)
                }.min()
            }
        }
        if let from = start.from, !fires.isEmpty { notes.append("from \(from.iso8601) (--from)") }
        if settings.runOnStart { notes.append("run_on_start: also runs once when watchkeeper starts") }
        if settings.fleet == .one { notes.append("fleet = \"one\": each fire runs on one host of the cluster") }
        return Preview(task: settings.name, schedule: schedule, zone: shownIn, notes: notes, fires: fires)
    }

    private static func jitterNote(_ start: Start, notes: inout [String]) {
        let jitter = start.settings.jitter
        guard jitter > .zero else { return }
        if let offset = start.jitterOffset {
            notes.append("jitter = \(jitter.compactDescription): the times include this task's delay of \(offset.compactDescription)"
                + (start.settings.fleet == .one ? " (the same on every host)" : " on this machine"))
        } else {
            notes.append("jitter = \(jitter.compactDescription): each fire starts up to \(jitter.compactDescription) after the time shown (a fixed delay for this task on each machine)")
        }
    }

    /// `every`: real time, from the daemon's armed fire, or from now for a file.
    private static func everyFires(_ start: Start, interval: Duration, count: Int, notes: inout [String]) -> [Fire] {
        // A fleet task's step is at least a millisecond, as TaskScheduler.scheduleFleetEvery has it.
        let step = start.epochAligned ? max(1_000_000, interval.nanosecondsClamped) : max(1, interval.nanosecondsClamped)
        let first: WallTime?
        let now = start.from ?? start.now
        func nanoseconds(_ time: WallTime) -> Int64 { time.secondsSinceEpoch * 1_000_000_000 + Int64(time.nanoseconds) }
        switch start.origin {
        case .daemon(let armed):
            // From another instant: the same anchor, the first whole interval after it.
            first = armed.map { armed in
                start.from.map { armed.adding(nanoseconds: (CivilCalendar.floorDivide(nanoseconds($0) - nanoseconds(armed), step) + 1) * step) } ?? armed
            }
            notes.append(start.epochAligned
                ? "whole intervals since the Unix epoch, the same instants on every host"
                : "from the daemon's anchor: whole intervals since it started the task (or the task last changed)")
        case .file where start.epochAligned:
            // As TaskScheduler.scheduleFleetEvery counts them.
            let offset = (start.jitterOffset ?? .zero).nanosecondsClamped % step
            first = WallTime(secondsSinceEpoch: 0, nanoseconds: 0).adding(nanoseconds: ((nanoseconds(now) - offset) / step + 1) * step + offset)
            notes.append("whole intervals since the Unix epoch, the same instants on every host")
        case .file:
            // The anchor is the start plus the jitter delay; the first fire a whole interval later.
            first = now.adding(nanoseconds: (start.jitterOffset ?? .zero).nanosecondsClamped + step)
            notes.append(start.from == nil ? "from now, anchored at start: the daemon counts whole intervals from when it starts the task"
                : "anchored at --from: the daemon counts whole intervals from when it starts the task")
        }
        jitterNote(start, notes: &notes)
        notes.append("real time: daylight-saving changes do not move these fires")
        guard let first else { return [] }
        return (0..<count).map { Fire(at: first.adding(nanoseconds: Int64($0) &* step), mark: nil) }
    }

    /// A schedule read in a zone's wall time: `next(after, zone)` is its first fire strictly
    /// after the instant (whole seconds), as the scheduler asks it.
    static func wallClockFires(_ start: Start, zone: TimeZoneRules, count: Int, notes: inout [String],
                               next: (Int64, TimeZoneRules) -> Int64?) -> [Fire] {
        jitterNote(start, notes: &notes)
        let jitter = (start.jitterOffset ?? .zero).nanosecondsClamped
        var cursor: Int64?
        switch start.origin {
        case _ where start.from != nil:
            cursor = start.from.flatMap { next($0.secondsSinceEpoch, zone) }
        case .daemon(let armed):
            // The armed target is the schedule's instant plus the jitter delay.
            cursor = armed.map { $0.adding(nanoseconds: -jitter).secondsSinceEpoch }
        case .file:
            cursor = next(start.now.secondsSinceEpoch, zone)
        }
        var fires: [Fire] = []
        while fires.count < count, let instant = cursor {
            fires.append(Fire(at: WallTime(secondsSinceEpoch: instant, nanoseconds: 0).adding(nanoseconds: jitter),
                              mark: mark(instant, in: zone, next: next)))
            cursor = next(instant, zone)
        }
        if fires.count < count && count > 0 { notes.append(fires.isEmpty ? "never fires" : "no further fires") }
        return fires
    }

    // MARK: Daylight-saving marks

    /// Whether a daylight-saving change moved this fire or repeated its wall time. Found
    /// from the zone and the schedule's own answers, so it says what the scheduler does:
    /// - moved: the fire lies within a forward jump's length after the jump, and the
    ///   schedule read in the offset after the jump does not name the wall time the fire
    ///   shows, so it fires here for a wall time the jump skipped (read in the offset
    ///   before it).
    /// - repeated: the zone shows the fire's wall time at two instants. Whether the second
    ///   fires too is the schedule walked on from the first, as the scheduler walks it (a
    ///   calendar event does not walk the repeated hour again, our cron's `*` hours do).
    static func mark(_ instant: Int64, in zone: TimeZoneRules, next: (Int64, TimeZoneRules) -> Int64?) -> Mark? {
        if let jump = forwardJump(before: instant, in: zone) {
            let after = Self.fixedZone(jump.after)
            if next(instant - 1, after) != instant {
                let before = Self.fixedZone(jump.before)
                let gapLength = Int64(jump.after.offsetSeconds - jump.before.offsetSeconds)
                // In the offset before the jump, the skipped wall times are the instants
                // [jump, jump + gap length).
                var from: LocalDateTime?
                if let skipped = next(jump.at - 1, before), skipped < jump.at + gapLength {
                    from = before.localTime(utcSeconds: skipped)
                }
                return .moved(from: from, gapStart: LocalDateTime(localSeconds: jump.at + Int64(jump.before.offsetSeconds)),
                              gapEnd: LocalDateTime(localSeconds: jump.at + Int64(jump.after.offsetSeconds)))
            }
        }
        let wall = zone.localTime(utcSeconds: instant)
        if case .repeated(let first, let second) = zone.resolve(wall) {
            let isFirst = instant == first
            let otherFires = isFirst ? reaches(second, walkingFrom: first, in: zone, next: next) : next(first - 1, zone) == first
            return .repeated(wall: wall, occurrence: isFirst ? 1 : 2, otherFires: otherFires,
                             abbreviations: [zone.offset(at: first).abbreviation, zone.offset(at: second).abbreviation])
        }
        return nil
    }

    /// Whether the schedule, fire after fire from `instant`, fires at `target` (within a
    /// fold's length: at most one fire a second).
    private static func reaches(_ target: Int64, walkingFrom instant: Int64, in zone: TimeZoneRules, next: (Int64, TimeZoneRules) -> Int64?) -> Bool {
        var cursor = instant
        while let following = next(cursor, zone), following <= target {
            if following == target { return true }
            cursor = following
        }
        return false
    }

    /// The forward jump of the clocks at or before the instant, if the instant is within
    /// the jump's length of it (where a fire for a skipped wall time can land).
    private static func forwardJump(before instant: Int64, in zone: TimeZoneRules) -> ZoneTransition? {
        var cursor = instant - TimeZoneRules.maximumOffsetSeconds
        var found: ZoneTransition?
        while let transition = zone.nextTransition(after: cursor), transition.at <= instant {
            let length = Int64(transition.after.offsetSeconds) - Int64(transition.before.offsetSeconds)
            found = length > 0 && instant < transition.at + length ? transition : nil
            cursor = transition.at
        }
        return found
    }

    /// A zone that always shows this one offset: the schedule read as if no change happened.
    private static func fixedZone(_ type: LocalTimeType) -> TimeZoneRules {
        TimeZoneRules(identifier: type.abbreviation, types: [type], transitionTimes: [], transitionTypeIndices: [], footer: nil)
    }
}

extension TaskScheduler {
    /// The starts of `watchkeeper next` for the named tasks (all, in configuration order,
    /// when none are named): copies of what the scheduler holds, taken in O(tasks) so the
    /// walk runs off this queue.
    public func previewStarts(_ names: [String], from: WallTime? = nil) -> Result<[FirePreview.Start], TriggerError> {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let now = WallTime.now()
        var starts: [FirePreview.Start] = []
        for name in names.isEmpty ? order : names {
            guard let task = tasks[name] else { return .failure(.unknownTask(name)) }
            let settings = task.settings
            var epochAligned = false
            // A task that was cron before a reload keeps its old zone; `every` shows local time.
            var zone = task.zone
            if case .every = settings.schedule {
                epochAligned = settings.fleet == .one && cluster != nil
                zone = nil
            }
            starts.append(FirePreview.Start(settings: settings, zone: zone, origin: .daemon(armed: task.nextFire?.wall), now: now,
                                            jitterOffset: jitterOffset(for: settings), epochAligned: epochAligned, from: from))
        }
        return .success(starts)
    }
}
