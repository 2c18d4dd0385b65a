# watchkeeper: build, run, test and install.
# Every target installs the Debian packages it needs first, so a fresh Debian 12
# machine (as root) needs nothing but this checkout and the Swift toolchain.

SWIFT_BIN ?= /opt/swift/usr/bin
export PATH := $(SWIFT_BIN):$(PATH)

PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  ?= $(PREFIX)/bin
DOCDIR  ?= $(PREFIX)/share/doc/watchkeeper
MANDIR  ?= $(PREFIX)/share/man
UNITDIR ?= /etc/systemd/system
CONFDIR ?= /etc/watchkeeper
# journalctl reads catalogs from /usr/local/lib/systemd/catalog and /usr/lib/systemd/catalog.
CATALOGDIR ?= $(PREFIX)/lib/systemd/catalog
# Where bash-completion, zsh (Debian's fpath) and fish look for completions under /usr/local.
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The Cockpit page (docs/cockpit.md): Cockpit reads /usr/local/share/cockpit as well as
# /usr/share/cockpit, so the default PREFIX works; PREFIX=/usr puts it in /usr/share/cockpit.
COCKPITDIR ?= $(PREFIX)/share/cockpit/watchkeeper

# groff-base and man-db: the man page test renders man/ with groff and man; zsh and fish parse
# their completion scripts in the completion test; tmux is the real terminal `status` is drawn
# in; python3-pip installs the `varlink` client the control socket is tested with.
# prometheus-node-exporter serves the metrics file in the metrics test, and prometheus brings
# promtool, which checks the alert rules. rsync, curl and unzip deliver files the way users do
# in the delivery-pattern test (Tests/reliability/deliveries.py). openssh-server and sshfs make
# the real network share over loopback that NetworkShareTests polls (sshd on a test port).
# etcd-server and etcd-client (3.4 in Debian 12) are the real clusters of the cluster tests
# (EtcdTestCluster), openssl makes their certificates and iproute2 the network namespace a
# partitioned daemon runs in (NetworkPartition). sysstat, e2fsprogs, apt, dpkg, logrotate (with
# man-db, util-linux and systemd) install the cron.d files and timers `watchkeeper import` is
# tested on (ImportCommandTests).
APT_PACKAGES = libsystemd-dev libsqlite3-dev pkg-config systemd util-linux procps groff-base man-db zsh fish tmux python3-pip \
               sysstat e2fsprogs apt dpkg logrotate \
               prometheus-node-exporter prometheus rsync curl unzip openssh-server sshfs \
               etcd-server etcd-client openssl iproute2
# The browser test (Tests/browser, the Cockpit page): Debian's Cockpit 287 (the web server,
# the bridge, and cockpit-system for the shell and its styles), Chromium and its WebDriver,
# and selenium, all from Debian: no browser download. Without recommends: 57 packages
# instead of 152 (about 40 s to install on a fresh machine).
BROWSER_TEST_PACKAGES = cockpit-ws cockpit-bridge cockpit-system chromium chromium-driver python3-selenium
# The Varlink client from PyPI (what other tools would call the control socket with), pinned,
# into the build directory only: never into the system's Python.
PYDEPS = .build/pydeps
VARLINK_PY = varlink==31.0.0
SWIFT_FLAGS ?=
RELEASE_BIN = .build/release/watchkeeper
DEBUG_BIN   = .build/debug/watchkeeper

.PHONY: all deps pydeps build release run check test unit-test fanotify-test poll-test e2e-test browser-test reliability nemesis sanitize fuzz bench install install-files uninstall clean

all: build

# Installs only what is missing, so repeated runs cost one dpkg query per package.
deps:
	@$(call apt_install,$(APT_PACKAGES),)
	@$(call apt_install,$(BROWSER_TEST_PACKAGES),--no-install-recommends)
	@command -v swift >/dev/null || { echo "unable to find swift: install the toolchain at $(SWIFT_BIN) or set SWIFT_BIN" >&2; exit 1; }

# $(call apt_install,PACKAGES,OPTIONS): apt-get install of those not installed yet.
define apt_install
missing=""; for p in $(1); do \
  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
done; \
if [ -n "$$missing" ]; then \
  echo "installing:$$missing"; \
  if [ "$$(id -u)" != 0 ]; then echo "unable to install$$missing: run as root or install them yourself" >&2; exit 1; fi; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing >/dev/null; \
fi
endef

build: deps
	swift build $(SWIFT_FLAGS)

# Static Swift runtime: the installed binary needs no toolchain on the target machine, and
# idle RSS drops from 21 to 13 MiB (docs/measurements/daemon.md).
# Relative relocations packed (DT_RELR, glibc 2.36+, linked by the toolchain's lld; gold
# cannot): the loader no longer reads 1.9 MB of .rela.dyn at start, 1.2 MiB less RSS with
# the binary still position-independent (docs/measurements/performance.md).
# Functions in sections of their own, laid out in the order of link/symbol-order.txt (the
# functions a daemon runs, from Tests/bench/symbol_order.py): the code an idle daemon
# touches sits together, 1.5 MiB less idle RSS (docs/measurements/performance.md). A stale
# file only costs memory: symbols it names that no longer exist are skipped. SwiftPM does
# not see the file as an input, so a newer one removes the binary to have it linked again.
# No dynamic symbol table of our own (the toolchain's static-stdlib-args.lnk asks for
# --export-dynamic; nothing dlopen'ed or dlsym'ed looks up the daemon's symbols): the loader
# no longer pages in 1 MB of .dynsym/.dynstr/.gnu.hash, 0.7 MiB less idle RSS. libstdc++
# (toml++'s) linked statically, only the parts it uses: the loader no longer maps and
# relocates all of libstdc++.so, another 0.7 MiB (docs/measurements/idle-memory.md). The
# driver's -lstdc++ comes before any flag of ours, so the archive is put where the first
# search directory that has either finds it: SwiftPM's -L of the build directory. The
# compiler's nameless private functions go together before .text (link/unnamed-text.ld):
# 1.2 MiB less idle RSS.
RELEASE_FLAGS = -c release --static-swift-stdlib -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs \
                -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections -Xcxx -ffunction-sections \
                -Xlinker --symbol-ordering-file=$(CURDIR)/link/symbol-order.txt -Xlinker --no-warn-symbol-ordering \
                -Xlinker --no-export-dynamic -Xlinker -T -Xlinker $(CURDIR)/link/unnamed-text.ld
RELEASE_DIR = .build/$(shell uname -m)-unknown-linux-gnu/release
# The Swift runtime's Swift.o keeps 12,675 functions in one 1.5 MiB .text, all of it resident
# for the 111 KiB a daemon runs. link/prepare_split.sh takes it out of libswiftCore.a and
# link/split_text.py cuts it into a section per function; link/ld_split.py, the linker swiftc is
# given, links that ahead of -lswiftCore so the order above reaches its functions, links the
# runtime as it came beside it, and compares the two (link/check_split.py: every instruction's
# target, every data word and jump-table entry that points into the section, every FDE),
# failing the link if they differ: 0.9-1.1 MiB less idle RSS (docs/measurements/idle-memory.md,
# "Splitting Swift.o after the fact"). Pinned to the Swift.o it was checked on: another is
# linked as it came, and `make release` says so on stderr. Other products link through ld.lld
# unchanged. The check adds 12-13 s to a release link, so it runs in every one.
SWIFT_CORE_ARCHIVE = $(SWIFT_BIN)/../lib/swift_static/linux/libswiftCore.a
SWIFT_O_SHA256 = 351d151c743c2f1b29f0f786323bdefd2ed9f845fe09776ebac76ed5e98a4acb
SPLIT_DIR = $(RELEASE_DIR)/runtime-split
RELEASE_FLAGS += -Xswiftc -ld-path=$(CURDIR)/link/ld_split.py -Xlinker --wk-split-dir=$(CURDIR)/$(SPLIT_DIR)

# SQLite for the release binary, compiled from Vendor/SQLite (Debian's 3.40.1 source and
# patches, the library debug builds link) with a section per function, so that the link
# order places the 300 KiB the daemon runs instead of whole 100 KiB objects: Debian's
# libsqlite3.a left 808 KiB of SQLite's code resident at idle (idle-memory.md). Debian's
# compile options, less the extensions the daemon's files never use (FTS3/4/5, R*Tree,
# sessions, dbstat, stmt, column metadata, soundex, unlock notify, loadable extensions),
# which sqlite3_open registers on every connection; the HAVE_* are what Debian's configure
# finds (usleep: without it a busy wait sleeps whole seconds). -Os: the code the daemon runs
# is mostly SQL compiled once at start, and -O2 inlined it into 490 KiB of resident code
# against 333 at -Os, while a 20,000-file burst cost the daemon no more CPU (idle-memory.md).
SQLITE_CFLAGS = -Os -g0 -fPIE -ffunction-sections -fdata-sections -fno-strict-aliasing -DNDEBUG \
                -DSQLITE_THREADSAFE=1 -DSQLITE_SECURE_DELETE -DSQLITE_OMIT_LOOKASIDE=1 \
                -DSQLITE_ALLOW_ROWID_IN_VIEW -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1 \
                -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_USE_URI=1 -DSQLITE_MAX_SCHEMA_RETRY=25 \
                -DSQLITE_MAX_VARIABLE_NUMBER=250000 -DSQLITE_ENABLE_MATH_FUNCTIONS \
                -DSQLITE_OMIT_LOAD_EXTENSION \
                -DHAVE_FDATASYNC=1 -DHAVE_GMTIME_R=1 -DHAVE_LOCALTIME_R=1 -DHAVE_ISNAN=1 \
                -DHAVE_PREAD64=1 -DHAVE_PWRITE64=1 -DHAVE_USLEEP=1 -DHAVE_STRCHRNUL=1 -DHAVE_UTIME=1

# Replaces what was a link to Debian's archive: never write through it.
$(RELEASE_DIR)/libsqlite3.a: Vendor/SQLite/sqlite3.c Makefile
	@mkdir -p $(RELEASE_DIR) && rm -f $@ $(RELEASE_DIR)/sqlite3.o
	clang -c $(SQLITE_CFLAGS) Vendor/SQLite/sqlite3.c -o $(RELEASE_DIR)/sqlite3.o
	llvm-ar rcs $@ $(RELEASE_DIR)/sqlite3.o

# Only the product `make install` ships (CI's second compile): `make bench` and `make
# reliability` build the benchmarks and watchkeeper-fleet-check in release mode too.
release: deps $(RELEASE_DIR)/libsqlite3.a
	@mkdir -p $(RELEASE_DIR) && ln -sf "$$(clang -print-file-name=libstdc++.a)" $(RELEASE_DIR)/libstdc++.a
	@sh link/prepare_split.sh $(SWIFT_CORE_ARCHIVE) $(SWIFT_O_SHA256) $(SPLIT_DIR)
	@# SwiftPM sees none of these as inputs of the link: the order, the script, SQLite's archive,
	@# the split object and the tools that link and check it.
	@for f in link/symbol-order.txt link/unnamed-text.ld $(RELEASE_DIR)/libsqlite3.a $(SPLIT_DIR)/mode \
	  $(SPLIT_DIR)/split/Swift.o link/ld_split.py link/check_split*.py link/elf_file.py; do \
	  if [ -e $$f ] && [ $$f -nt $(RELEASE_BIN) ]; then rm -f $(RELEASE_BIN); fi; done
	swift build $(RELEASE_FLAGS) --product watchkeeper $(SWIFT_FLAGS)
	@if [ -f $(SPLIT_DIR)/split/Swift.o ]; then \
	  if [ ! $(SPLIT_DIR)/checked -nt $(RELEASE_BIN) ]; then rm -f $(RELEASE_BIN); \
	    echo "release: $(RELEASE_BIN) was not checked against a link with the Swift runtime as it came (link/ld_split.py)"; exit 1; fi; \
	  cat $(SPLIT_DIR)/checked; fi
	@# libstdc++.so in the binary's needs means the archive above was not found first.
	@if llvm-objdump -p $(RELEASE_BIN) | grep -q "NEEDED.*libstdc++"; then \
	  echo "release: $(RELEASE_BIN) needs libstdc++.so; $(RELEASE_DIR)/libstdc++.a should have been linked"; exit 1; fi
	@if llvm-objdump -p $(RELEASE_BIN) | grep -q "NEEDED.*libsqlite3"; then \
	  echo "release: $(RELEASE_BIN) needs libsqlite3.so; $(RELEASE_DIR)/libsqlite3.a should have been linked"; exit 1; fi
	@# systemd's protocols are spoken natively and sd-journal is dlopen'ed by `logs` alone
	@# (Sources/CWatchkeeperSystemd): libsystemd and its six libraries cost 0.9 MiB of idle RSS.
	@if llvm-objdump -p $(RELEASE_BIN) | grep -q "NEEDED.*libsystemd"; then \
	  echo "release: $(RELEASE_BIN) needs libsystemd.so; call CWatchkeeperSystemd's wk_* functions instead of sd_*"; exit 1; fi
	@# A module that imports Foundation links all of it and ICU's data into the static binary:
	@# 48 MB and 2.4 MiB of idle RSS (docs/measurements/performance.md). Nor FoundationEssentials, below.
	@if llvm-nm $(RELEASE_BIN) | grep -q ' \$$s10Foundation'; then \
	  echo "release: $(RELEASE_BIN) links Foundation; the daemon imports neither it nor FoundationEssentials (llvm-nm $(RELEASE_BIN) | grep s10Foundation)"; exit 1; fi
	@# FoundationEssentials and _StringProcessing, which it and one string search each pull in with
	@# _RegexParser: 10.6 MB and 0.8-1.0 MiB of idle RSS (idle-memory.md). Vendor/swift-argument-parser
	@# and Vendor/TOMLKit do without; search strings with contains(utf8:) (Support/TextSearch.swift).
	@if llvm-nm $(RELEASE_BIN) | grep -qE ' \$$s(20FoundationEssentials|17_StringProcessing)'; then \
	  echo "release: $(RELEASE_BIN) links FoundationEssentials or _StringProcessing: llvm-nm -u the objects for s20FoundationEssentials and s17_StringProcessing, and use contains(utf8:), ranges(utf8:), split(utf8Separator:)"; exit 1; fi

# The split runtime's checker proved able to fail: each of link/split_text.py's mutations, linked
# with the release link's own command, must be reported by link/check_split.py (about a minute).
.PHONY: link-test
link-test: release
	python3 Tests/link/split_mutations.py --split-dir $(SPLIT_DIR)

# Foreground daemon on the demo configuration; state and runtime files go under demo/var.
run: build
	@mkdir -p demo/var/run demo/var/lib /tmp/watchkeeper-demo/inbox
	@echo "watchkeeper: running in the foreground on demo/watchkeeper.toml"
	@echo "watchkeeper: from another terminal: kill -USR1 \$$(pgrep -xo watchkeeper) for a state dump (also in demo/var/run/state.json),"
	@echo "watchkeeper: kill -HUP for a reload; Ctrl-C or kill -TERM drains and exits"
	@echo "watchkeeper: copy a file into the demo inbox to start a job: cp README.md /tmp/watchkeeper-demo/inbox/"
	RUNTIME_DIRECTORY=$(CURDIR)/demo/var/run STATE_DIRECTORY=$(CURDIR)/demo/var/lib \
	  $(DEBUG_BIN) run --config $(CURDIR)/demo/watchkeeper.toml

# --target installs beside the system's Python, which Debian marks externally managed (PEP 668).
pydeps:
	@test -d $(PYDEPS)/varlink || python3 -m pip install --quiet --disable-pip-version-check --target $(PYDEPS) $(VARLINK_PY)

# The unit tier, what a developer runs after each change (under 2 minutes on 2 cores after the
# build): WatchkeeperCoreTests (each owner driven with fakes at its edges, or with real jobs
# and files where those are cheap), the importers, the fleet history checker, and the fleet's
# deterministic simulation on 500 seeds (make test runs 10,000). No daemon is started.
UNIT_TESTS = ^(WatchkeeperCoreTests|WatchkeeperImportTests|FleetCheckTests|FleetSimulationTests)\.
check: deps
	WATCHKEEPER_SIM_SEEDS=500 swift test --disable-swift-testing --filter '$(UNIT_TESTS)' $(SWIFT_FLAGS)

# Every test once (docs/testing.md): unit and integration (swift test; the watch tests about
# how a change is heard run under inotify, fanotify and poll as tests of their own,
# Watching/WatchMethodMatrix.swift), the end-to-end test under a real systemd, the Cockpit
# page in Chromium, and the reliability scenarios at small sizes. The tests of the etcd test
# harness itself run in `make reliability` (its "harness" scenario), not here.
# swift test runs in three steps: the unit tier (CPU-bound); then the integration tests in
# two processes at once, both mostly waiting (on daemons and jobs; on etcd's leases and
# partitions, sshfs shares and stalled log sinks for the classes in WAITING_TEST_CLASSES,
# about as long as the rest); then alone the tests that lower a machine-wide kernel limit
# (a daemon the other process started meanwhile would get a 32-event queue or one inotify
# watch). SwiftPM lets one `swift test` at a time use .build, so the second process is the
# test bundle itself, run by class (a class not listed runs with the others).
HARNESS_TESTS = \.EtcdTestCluster(TLS|Partition)?Tests/
INTEGRATION_TESTS = ^WatchkeeperIntegrationTests\.
WAITING_TEST_CLASSES = EtcdTestClusterGatewayTests FleetAuthTests FleetFaultTests FleetPartitionTests FleetTLSTests FleetTaskTests \
                       SharedInboxFaultTests SharedInboxTests NetworkShareTests StalledLogSinkTests
KERNEL_LIMIT_TESTS = ^WatchkeeperIntegrationTests\.WatchRunTests/(testQueueOverflow|testWatchLimit)
empty :=
space := $(empty) $(empty)
comma := ,
WAITING_TESTS = ^WatchkeeperIntegrationTests\.($(subst $(space),|,$(strip $(WAITING_TEST_CLASSES))))/
WAITING_TEST_CASES = $(subst $(space),$(comma),$(addprefix WatchkeeperIntegrationTests.,$(strip $(WAITING_TEST_CLASSES))))
WAITING_TEST_LOG = .build/waiting-tests.log
TEST_BUNDLE = .build/debug/watchkeeperPackageTests.xctest
SWIFT_TEST = swift test --disable-swift-testing --skip-build
# The three steps all run, whatever one of them found; make stops after them if any failed.
test: build pydeps
	swift build --build-tests $(SWIFT_FLAGS)
	@echo "swift test: the unit tier"; failed=""; \
	$(SWIFT_TEST) --skip '$(INTEGRATION_TESTS)' $(SWIFT_FLAGS) || failed="$$failed unit"; \
	echo "swift test: $(WAITING_TEST_CLASSES) run beside the other integration tests; their output follows (and is in $(WAITING_TEST_LOG))"; \
	$(TEST_BUNDLE) '$(WAITING_TEST_CASES)' > $(WAITING_TEST_LOG) 2>&1 & waiting=$$!; \
	$(SWIFT_TEST) --filter '$(INTEGRATION_TESTS)' --skip '$(WAITING_TESTS)' --skip '$(HARNESS_TESTS)' --skip '$(KERNEL_LIMIT_TESTS)' $(SWIFT_FLAGS) \
	  || failed="$$failed integration"; \
	wait $$waiting || failed="$$failed waiting"; cat $(WAITING_TEST_LOG); \
	echo "swift test: the tests that lower a kernel limit, alone"; \
	$(SWIFT_TEST) --filter '$(KERNEL_LIMIT_TESTS)' $(SWIFT_FLAGS) || failed="$$failed kernel-limit"; \
	if [ -n "$$failed" ]; then echo "swift test: failures in:$$failed"; exit 1; fi
	Tests/e2e/systemd-e2e.sh $(CURDIR)/$(DEBUG_BIN)
	$(MAKE) --no-print-directory browser-test
	python3 Tests/reliability/run.py --short --binary $(DEBUG_BIN)

# The long reliability suite (issue 11; up to an hour): crash-restarts, hostile jobs, the
# peers side by side, fuzzing, a 30-minute soak; rewrites the table in docs/reliability.md.
# inotify-tools and incron are the peers; gdb saves a hung daemon's stacks.
RELIABILITY_PACKAGES = inotify-tools incron gdb
reliability: release build pydeps
	@for p in $(RELIABILITY_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p >/dev/null; done
	@# Debian starts incrond when it installs it; the suite runs its own.
	@if pgrep -x incrond >/dev/null; then systemctl stop incron 2>/dev/null || pkill -x incrond; fi
	swift build --build-tests $(SWIFT_FLAGS)
	@# The nemesis reads its history with the watchkeeper-fleet-check beside the binary.
	swift build $(RELEASE_FLAGS) $(SWIFT_FLAGS)
	python3 Tests/reliability/run.py --long --binary $(RELEASE_BIN) --doc docs/reliability.md

# Issue 35's nemesis alone (it is also a scenario of both reliability runs above): three
# daemons on a three-member etcd under seeded faults, its history read by watchkeeper-fleet-check.
# SEED=N replays a schedule; NEMESIS_SECONDS of faults (default 600); root only.
NEMESIS_SECONDS ?= 600
nemesis: build
	python3 Tests/reliability/fleet_nemesis.py $(DEBUG_BIN) --seconds $(NEMESIS_SECONDS) $(if $(SEED),--seed $(SEED))

# Every unit and integration test under AddressSanitizer, then under ThreadSanitizer, each
# in its own build directory, with the integration tests' daemon built the same way.
# LeakSanitizer is off: Swift keeps references with tag bits (enum payloads, weak
# references' side tables) where it cannot see them, and the daemon exits with its objects
# alive; leaks are measured by the soak and by LeakSanitizer in `make fuzz` instead
# (docs/reliability.md, "Sanitizers"). The TSan build swaps Synchronization's Mutex for a
# pthread mutex that ThreadSanitizer can see (Support/ThreadSanitizerMutex.swift). Test
# deadlines stretch (WATCHKEEPER_TEST_DEADLINE_SCALE): the builds run 2-10 times slower.
# ASan's quarantine of freed memory is capped at 64 MiB and memory bounds in tests allow
# for it (WATCHKEEPER_TEST_MEMORY_ALLOWANCE_MB): at its default 256 MiB a daemon streaming a
# 30 MB line peaked at 103 MB, over the test's 80 MB, with nothing of it live.
ASAN_QUARANTINE_MB = 64
ASAN_TEST_OPTIONS ?= detect_leaks=0:quarantine_size_mb=$(ASAN_QUARANTINE_MB)
TSAN_TEST_OPTIONS ?= halt_on_error=0
sanitize: deps pydeps
	swift build --build-tests --sanitize=address --scratch-path .build-asan $(SWIFT_FLAGS)
	WATCHKEEPER_SIM_SEEDS=1000 WATCHKEEPER_BIN=$(CURDIR)/.build-asan/debug/watchkeeper ASAN_OPTIONS=$(ASAN_TEST_OPTIONS) WATCHKEEPER_TEST_DEADLINE_SCALE=3 WATCHKEEPER_TEST_MEMORY_ALLOWANCE_MB=$(ASAN_QUARANTINE_MB) \
	  swift test --disable-swift-testing --skip-build --scratch-path .build-asan $(SWIFT_FLAGS)
	swift build --build-tests --sanitize=thread -Xswiftc -DWATCHKEEPER_TSAN --scratch-path .build-tsan $(SWIFT_FLAGS)
	WATCHKEEPER_SIM_SEEDS=1000 WATCHKEEPER_BIN=$(CURDIR)/.build-tsan/debug/watchkeeper TSAN_OPTIONS=$(TSAN_TEST_OPTIONS) WATCHKEEPER_TEST_DEADLINE_SCALE=5 \
	  swift test --disable-swift-testing --skip-build --scratch-path .build-tsan $(SWIFT_FLAGS)

# libFuzzer (with ASan) on each parser of outside input for FUZZ_RUNS executions, from the
# seeds and kept crashes under Tests/fuzz; the binary is built apart, in .build-fuzz.
FUZZ_RUNS ?= 200000
fuzz: deps
	python3 Tests/fuzz/fuzz.py --build --runs $(FUZZ_RUNS)

unit-test: build pydeps
	swift test --disable-swift-testing $(SWIFT_FLAGS)

# One column of the watch method matrix (Tests/WatchkeeperIntegrationTests/Watching/
# WatchMethodMatrix.swift) with the method's own tests, for work on that backend; `make test`
# runs them too. Each fanotify test mounts a tmpfs of its own (a mark hears its whole file
# system); root only, skipped otherwise.
fanotify-test: build
	swift test --disable-swift-testing --filter '_underFanotify$$|FanotifyMethodTests' $(SWIFT_FLAGS)

# And the poll column (`poll_interval` and `poll_settle` of 1 s): what a poll finds goes
# through the same admission as an event.
poll-test: build
	swift test --disable-swift-testing --filter '_underPoll$$|PollMethodTests' $(SWIFT_FLAGS)

e2e-test: build
	Tests/e2e/systemd-e2e.sh $(CURDIR)/$(DEBUG_BIN)

# The Cockpit page in Chromium against real daemons (about a minute; root: it runs in a
# mount and network namespace of its own). Debian's python3, which has python3-selenium.
# BROWSER_SCREENSHOTS=docs/images renews the README's pictures.
BROWSER_SCREENSHOTS ?= .build/browser-test
browser-test: build
	/usr/bin/python3 Tests/browser/run.py --binary $(DEBUG_BIN) --screenshots $(BROWSER_SCREENSHOTS)

bench: release
	swift build $(RELEASE_FLAGS) $(SWIFT_FLAGS)
	.build/release/watchkeeper-bench $(BENCH)

install: release
	$(MAKE) --no-print-directory install-files BIN=$(RELEASE_BIN)

# Copies an already built binary with the unit, example config, docs and man pages (used by
# `install`, and by the end-to-end test with the debug build).
BIN ?= $(RELEASE_BIN)
install-files:
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/watchkeeper
	install -d $(DESTDIR)$(UNITDIR)
	sed 's|@BINDIR@|$(BINDIR)|g' systemd/watchkeeper.service > $(DESTDIR)$(UNITDIR)/watchkeeper.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/watchkeeper.service
	@# An administrator's edited configuration is never overwritten.
	@if [ -e $(DESTDIR)$(CONFDIR)/watchkeeper.toml ]; then \
	  echo "keeping existing $(DESTDIR)$(CONFDIR)/watchkeeper.toml"; \
	else \
	  install -D -m 0644 etc/watchkeeper/watchkeeper.toml $(DESTDIR)$(CONFDIR)/watchkeeper.toml; \
	fi
	install -d $(DESTDIR)$(DOCDIR)
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 etc/prometheus/watchkeeper-alerts.yml $(DESTDIR)$(DOCDIR)/
	@# Beside the docs, not in a watchkeeper.service.d: only a unit whose rules use fanotify
	@# should carry CAP_SYS_ADMIN (docs/operations.md, "Huge trees: fanotify").
	install -m 0644 systemd/fanotify.conf $(DESTDIR)$(DOCDIR)/
	install -D -m 0644 catalog/watchkeeper.catalog $(DESTDIR)$(CATALOGDIR)/watchkeeper.catalog
	@# Completions come from the binary itself (swift-argument-parser), so they match its options.
	install -d $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	$(BIN) --generate-completion-script bash > $(DESTDIR)$(BASHCOMPDIR)/watchkeeper
	$(BIN) --generate-completion-script zsh > $(DESTDIR)$(ZSHCOMPDIR)/_watchkeeper
	$(BIN) --generate-completion-script fish > $(DESTDIR)$(FISHCOMPDIR)/watchkeeper.fish
	@# journalctl -x reads the catalog from its database, rebuilt here.
	@if [ -z "$(DESTDIR)" ] && command -v journalctl >/dev/null; then journalctl --update-catalog; fi
	install -D -m 0644 man/watchkeeper.8 $(DESTDIR)$(MANDIR)/man8/watchkeeper.8
	install -D -m 0644 man/watchkeeper.toml.5 $(DESTDIR)$(MANDIR)/man5/watchkeeper.toml.5
	@# The Cockpit page: plain files, its manifest told where this binary is.
	install -d $(DESTDIR)$(COCKPITDIR)
	install -m 0644 cockpit/index.html cockpit/*.js cockpit/*.css $(DESTDIR)$(COCKPITDIR)/
	sed 's|"command": "watchkeeper"|"command": "$(BINDIR)/watchkeeper"|' cockpit/manifest.json > $(DESTDIR)$(COCKPITDIR)/manifest.json
	chmod 0644 $(DESTDIR)$(COCKPITDIR)/manifest.json
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now watchkeeper.service 2>/dev/null || true; fi
	rm -f $(DESTDIR)$(BINDIR)/watchkeeper $(DESTDIR)$(UNITDIR)/watchkeeper.service
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -f $(DESTDIR)$(CATALOGDIR)/watchkeeper.catalog
	rm -f $(DESTDIR)$(BASHCOMPDIR)/watchkeeper $(DESTDIR)$(ZSHCOMPDIR)/_watchkeeper $(DESTDIR)$(FISHCOMPDIR)/watchkeeper.fish
	@if [ -z "$(DESTDIR)" ] && command -v journalctl >/dev/null; then journalctl --update-catalog; fi
	rm -f $(DESTDIR)$(MANDIR)/man8/watchkeeper.8 $(DESTDIR)$(MANDIR)/man5/watchkeeper.toml.5
	rm -rf $(DESTDIR)$(COCKPITDIR)
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "left $(CONFDIR) and /var/lib/watchkeeper in place: remove them by hand if you want them gone"

clean:
	rm -rf .build demo/var
