"""The load meter does not count interrupt time as the others' load.

A run cannot run code outside its process tree, but it can make the kernel work for it where no
process is charged: a loopback TCP stream between two of its own processes (its sandbox has its
own network namespace, with a loopback) shows about a quarter of its CPU as softirq time in
/proc/stat (measured on the 2-core dev box: 1.14 s softirq for 3.57 s of the stream's own CPU).
Counted as busy, that time was "the others'": a run could raise its load factor, and with it its
startup, post and slack allowances, by making traffic. busy_of leaves irq and softirq out."""
import os
import socket
import time
import threading


from harness import procs

#          user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  100  20   30    900  40     7   11      5     0     0"


def test_busy_is_user_nice_system_and_steal():
    assert procs.busy_of(LINE) == 100 + 20 + 30 + 5


def test_interrupt_time_raises_nothing():
    more_irq = LINE.replace(" 7   11 ", " 7000   11000 ")
    assert procs.busy_of(more_irq) == procs.busy_of(LINE)


def test_malformed_lines_read_as_unknown():
    assert procs.busy_of("") is None
    assert procs.busy_of("intr 1 2 3") is None
    assert procs.busy_of("cpu  1 2 x 4") is None


def test_the_machine_line_reads_and_a_loopback_stream_is_counted_only_as_its_own_cpu():
    """On the real /proc/stat: after a loopback stream, the machine's busy ticks grew by no more
    than user + nice + system + steal did (the softirq the stream made is not among them)."""
    def fields():
        with open("/proc/stat") as f:
            line = f.readline()
        return line, [int(x) for x in line.split()[1:9]]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def sink():
        c, _ = srv.accept()
        while c.recv(1 << 20):
            pass
        c.close()
    t = threading.Thread(target=sink)
    t.start()
    line0, v0 = fields()
    with socket.create_connection(srv.getsockname()) as a:
        for _ in range(2000):
            a.sendall(b"x" * 65536)
    t.join()
    srv.close()
    line1, v1 = fields()
    d = [b - a for a, b in zip(v0, v1)]
    assert procs.busy_of(line1) - procs.busy_of(line0) == d[0] + d[1] + d[2] + d[7]


REAPED = '''
import os, signal, sys, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)      # the kernel reaps the children: their CPU reaches no parent
out = sys.argv[1]
for k in range(6):
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < 0.3:
            pass
        with open(out, "a") as f:
            f.write(f"{time.process_time()}\\n")
        os._exit(0)
    time.sleep(0.35)
time.sleep(0.5)
'''


def _children_cpu(path):
    return sum(float(x) for x in path.read_text().split())


def test_children_the_kernel_reaps_are_the_run_s_own_cpu_never_the_others(tmp_path):
    """A run that ignores SIGCHLD: its children's CPU never reaches its parent's counts in /proc.
    Counted as "the machine's total minus the run's tree", it would be the others' load and widen
    the run's allowances. With a cgroup of its own the run's count holds every child; without
    one the others are also counted one by one and the smaller reading is kept."""
    import subprocess
    import sys
    from harness.procs import CpuAccount
    script, out = tmp_path / "reaped.py", tmp_path / "children.txt"
    script.write_text(REAPED)
    account = CpuAccount("test-reaped")
    proc = subprocess.Popen(account.enter + [sys.executable, str(script), str(out)], start_new_session=True)
    exact = procs.LoadMeter(proc.pid, account=account)          # the cgroup (where one could be made)
    tree = procs.LoadMeter(proc.pid)                            # the fallback: tree and direct count
    naive = procs.LoadMeter(proc.pid)                           # total minus the tree, as before
    naive._tree_and_others = lambda: (procs._tree_ticks(proc.pid) or 0) / procs._HZ
    naive._direct = float("inf")                                    # no direct count to bound it
    while proc.poll() is None:
        for m in (exact, tree, naive):
            m.sample(force=True)
        time.sleep(0.1)
    children = _children_cpu(out)
    account.close()
    assert children > 1.0
    # the direct count never takes the vanished children for the others' load
    assert tree.samples[-1][1] <= naive.samples[-1][1] - 0.5 * children, (tree.samples[-1], naive.samples[-1])


def test_a_cgroup_counts_every_child_where_one_can_be_made(tmp_path):
    """Where the harness may make a cgroup (root, as in CI and most GPU clouds), the run's own CPU
    is the cgroup's and holds the children the kernel reaped; the others' share stays the others'."""
    import subprocess
    import sys
    from harness.procs import CpuAccount
    script, out = tmp_path / "reaped.py", tmp_path / "children.txt"
    script.write_text(REAPED)
    account = CpuAccount("test-reaped-cgroup")
    made = account.path is not None
    assert made or os.geteuid() != 0, "as root (CI, most GPU clouds) the run gets a cgroup of its own"
    proc = subprocess.Popen(account.enter + [sys.executable, str(script), str(out)], start_new_session=True)
    meter = procs.LoadMeter(proc.pid, account=account)
    while proc.poll() is None:
        meter.sample(force=True)
        time.sleep(0.1)
    meter.sample(force=True)
    own, exact = meter.samples[-1][2], meter.exact
    used = account.used_s()
    account.close()
    children = _children_cpu(out)
    if made:
        assert exact and used is not None and used >= children, (used, children)
        assert own >= 0.9 * children, (own, children)
    else:
        assert not exact and used is None
