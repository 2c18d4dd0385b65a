#if canImport(Glibc)
import Glibc
#endif

/// Where the main thread waits once every subsystem runs on its queue.
///
/// dispatchMain() would park it through pthread_exit. pthread_exit's forced unwind looks up
/// each of the main thread's frames in the binary's unwind tables, and those lookups alone
/// keep 0.45 MiB of `.eh_frame_hdr` and `.eh_frame` resident in an idle daemon
/// (docs/measurements/idle-memory.md, "The main thread's unwind"). Nothing in the daemon
/// runs on the main queue, so the main thread only has to stay: it sleeps here with every
/// signal blocked. The handled signals stay pending for their signalfd-backed sources, as
/// they do in every other thread.
public enum MainThreadPark {
    public static func forever() -> Never {
        var every = sigset_t()
        sigfillset(&every)
        pthread_sigmask(SIG_SETMASK, &every, nil)
        while true {
            // With every signal blocked only SIGKILL or SIGSTOP ends this, or exit() from
            // another thread.
            _ = pause()
        }
    }
}
