"""The load meter does not count interrupt time as the others' load.

A run cannot run code outside its process tree, but it can make the kernel work for it where no
process is charged: a loopback TCP stream between two of its own processes (its sandbox has its
own network namespace, with a loopback) shows about a quarter of its CPU as softirq time in
/proc/stat (measured on the 2-core dev box: 1.14 s softirq for 3.57 s of the stream's own CPU).
Counted as busy, that time was "the others'": a run could raise its load factor, and with it its
startup, post and slack allowances, by making traffic. busy_of leaves irq and softirq out."""
import socket
import threading

from harness import clock as clock_mod

#          user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  100  20   30    900  40     7   11      5     0     0"


def test_busy_is_user_nice_system_and_steal():
    assert clock_mod.busy_of(LINE) == 100 + 20 + 30 + 5


def test_interrupt_time_raises_nothing():
    more_irq = LINE.replace(" 7   11 ", " 7000   11000 ")
    assert clock_mod.busy_of(more_irq) == clock_mod.busy_of(LINE)


def test_malformed_lines_read_as_unknown():
    assert clock_mod.busy_of("") is None
    assert clock_mod.busy_of("intr 1 2 3") is None
    assert clock_mod.busy_of("cpu  1 2 x 4") is None


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
    assert clock_mod.busy_of(line1) - clock_mod.busy_of(line0) == d[0] + d[1] + d[2] + d[7]
