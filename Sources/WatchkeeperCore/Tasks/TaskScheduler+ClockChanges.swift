import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// Cron tasks across a set of the system clock. Their timers wait for a wall-clock
/// instant, which the kernel compares with the clock as it is now:
///
/// - Forward (an NTP step, a resume from suspend): a timer whose instant was skipped fires
///   at once, so each cron task due in the skipped time runs once, not once per missed
///   instant, and is then due at its next instant after the new time. Nothing to do here.
/// - Back: a timer armed for 10:01 would wait until the clock shows 10:01 again, two hours
///   and a minute if the clock went back two hours. Each cron task is armed again from the
///   new time, as cronie does for changes: an interval expression (`*/5 * * * *`, hourly)
///   goes on at its next matching minute; any other expression does not fire again at an
///   instant it already fired at, so the daily 03:00 backup does not run twice.
extension TaskScheduler {
    func watchClockChanges() {
        guard clockWatcher == nil else { return }
        do {
            clockWatcher = try ClockChangeWatcher(queue: queue, sources: context.sources) { [weak self] moved in
                self?.clockWasSet(movedBySeconds: moved)
            }
        } catch {
            logger.warning("unable to watch for changes of the system clock (timerfd: \(error)): after the clock is set back, cron tasks wait until it shows their next time again")
        }
    }

    func clockWasSet(movedBySeconds moved: Int64) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let amount = "\(moved >= 0 ? "+" : "-")\(Duration.seconds(abs(moved)).compactDescription)"
        guard moved < 0 else {
            // A step of under a second (an NTP correction at boot) is not worth a line.
            if moved > 0 {
                logger.notice("the system clock jumped forward (\(amount); set, or the machine resumed): cron tasks due in the skipped time run once now")
            }
            return
        }
        let now = WallTime.now()
        var armed: [String] = []
        for task in tasks.values {
            // Only cron tasks armed now: not after the drain's stop(), nor an expression that never fires.
            guard task.settings.schedule.isWallClock, task.timer != nil, task.nextFire != nil else { continue }
            var after = now
            // A cron expression whose hour field matches every hour is an interval (see nextFire).
            var isInterval = false
            if case .cron(let expression, _) = task.settings.schedule { isInterval = expression.matchesEveryHour }
            if !isInterval, let last = task.lastCronFire, last > now.secondsSinceEpoch {
                after = WallTime(secondsSinceEpoch: last, nanoseconds: 0)
            }
            scheduleCron(task, after: after)
            armed.append(task.settings.name)
        }
        let names = armed.sorted()
        logger.notice("the system clock was set back (\(amount)): \(names.count) cron task(s) armed again from the new time\(names.isEmpty ? "" : ": " + names.prefix(10).joined(separator: ", "))")
    }
}
