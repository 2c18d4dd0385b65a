#!/usr/bin/env python3
"""Instructions for start -> READY=1 -> SIGTERM -> exit 0 under callgrind (a count that does
not depend on what else the machine is doing). usage: callgrind_lifecycle.py BINARY"""
import os, re, shutil, signal, socket, subprocess, sys, tempfile
binary = sys.argv[1]
directory = tempfile.mkdtemp(prefix="wk-cg-")
config = os.path.join(directory, "watchkeeper.toml")
open(config, "w").write('[daemon]\nlog_level = "info"\n')
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(os.path.join(directory, "notify.sock"))
sock.settimeout(120)
env = {"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": os.path.join(directory, "notify.sock"),
       "RUNTIME_DIRECTORY": os.path.join(directory, "run"), "STATE_DIRECTORY": os.path.join(directory, "state")}
child = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + os.environ.get("CG_OUT", "/dev/null"), binary, "run", "--config", config],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
while b"READY=1" not in sock.recv(4096).split(b"\n"):
    pass
child.send_signal(signal.SIGTERM)
_, err = child.communicate(timeout=120)
shutil.rmtree(directory)
print(binary, "exit", child.returncode, re.findall(rb"Collected : (\d+)", err))
