#!/usr/bin/python3
"""One gloo connection through an emulated WAN link: a message one way, then both ways at once;
the same with one plain TCP connection (Python sockets) for comparison.

    sudo PYTHONPATH=build/release/python:runtime /usr/bin/python3 validation/duplex.py \
        [--rate 100e6] [--bytes 1734144]

Two workers in two shaped clusters (runtime/hgsim_runtime/wan.py) send `--bytes` (default: one
piece of the outer all-reduce of scenarios/live/diloco.yaml) from rank 0 to rank 1, then both
to each other at once (isend + recv, as a two-member ring step does), three times each, and
print the times next to bytes / rate. The simulator treats the two directions of a link as
independent; a ring of two islands (DiLoCo's outer all-reduce) uses both at once.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# scripts/script_cli.py: one-line errors, exit 1, arguments checked before any long work.
_cli_spec = importlib.util.spec_from_file_location(
    "script_cli", os.path.join(ROOT, "scripts", "script_cli.py"))
cli = importlib.util.module_from_spec(_cli_spec)
_cli_spec.loader.exec_module(cli)

WORKER = r"""
import os, sys, time, torch, torch.distributed as dist
rank, n, mode = int(os.environ["RANK"]), int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"],
                        os.environ["MASTER_PORT"]), rank=rank, world_size=2)
out, inc = torch.zeros(n // 4), torch.zeros(n // 4)
for _ in range(3):
    dist.barrier()
    t0 = time.monotonic()
    if mode == "both":
        work = dist.isend(out, 1 - rank)
        dist.recv(inc, 1 - rank)
        work.wait()
    elif rank == 0:
        dist.send(out, 1)
    else:
        dist.recv(inc, 0)
    dist.barrier()
    if rank == 0:
        print(time.monotonic() - t0, flush=True)
dist.destroy_process_group()
"""

# The same exchange over one plain TCP connection: rank 1 connects to rank 0.
SOCKETS = r"""
import os, socket, sys, threading, time
rank, n, mode = int(os.environ["RANK"]), int(sys.argv[1]), sys.argv[2]
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    listener = socket.socket()
    listener.bind((addr, port))
    listener.listen(1)
    c, _ = listener.accept()
else:
    c = socket.socket()
    for _ in range(200):
        try:
            c.connect((addr, port))
            break
        except OSError:
            time.sleep(0.05)
for _ in range(3):
    c.sendall(b"s"); c.recv(1)
    t0 = time.monotonic()
    sender = threading.Thread(target=lambda: c.sendall(b"x" * n)
                              if mode == "both" or rank == 0 else None)
    sender.start()
    want, got = (n if mode == "both" or rank == 1 else 0), 0
    while got < want:
        got += len(c.recv(1 << 20))
    sender.join()
    c.sendall(b"d"); c.recv(1)
    if rank == 0:
        print(time.monotonic() - t0, flush=True)
"""


def main(argv=None) -> int:
    parser = cli.Parser(description="One gloo connection through an emulated WAN link.")
    parser.add_argument("--rate", type=cli.positive_float, default=100e6,
                        help="bits per second")
    parser.add_argument("--bytes", type=cli.positive_int, default=1734144)
    args = parser.parse_args(argv)
    try:
        from hgsim_runtime.supervisor import WorkerSpec, run_workers
        from hgsim_runtime.wan import EmulatedWan
    except ImportError as e:
        raise cli.ScriptError(f"cannot import hgsim_runtime ({cli.quoted(e)}): run with "
                              "PYTHONPATH=build/release/python:runtime") from None
    folder = tempfile.mkdtemp(prefix="hgsim-duplex-")
    scripts = {}
    for name, text in (("gloo", WORKER), ("TCP socket", SOCKETS)):
        scripts[name] = os.path.join(folder, name.replace(" ", "_") + ".py")
        with open(scripts[name], "w") as f:
            f.write(text)
    links = [{"from": "a", "to": "b", "rate_bps": args.rate, "reverse_rate_bps": args.rate}]
    print(f"{args.bytes} bytes at {args.rate / 1e6:g} Mbit/s: bytes / rate = "
          f"{args.bytes * 8 / args.rate:.4f} s")
    for name, script in scripts.items():
        for mode in ("one", "both"):
            with EmulatedWan(["a", "b"], links, shape=True) as wan:
                port = str(random.randint(20000, 50000))
                specs = [WorkerSpec(r, c, [sys.executable, script, str(args.bytes), mode],
                                    {"MASTER_ADDR": wan.address("a"), "MASTER_PORT": port,
                                     "RANK": str(r), "GLOO_SOCKET_IFNAME": wan.interface(c)},
                                    os.path.join(folder, f"{mode}{r}.log"))
                         for r, c in enumerate(["a", "b"])]
                run_workers(specs, wan, timeout_s=300)
            with open(os.path.join(folder, f"{mode}0.log")) as f:
                times = [float(x) for x in f.read().split()[-3:]]
            label = f"{name}, " + ("one way" if mode == "one" else "both ways at once")
            print(f"  {label:30s} " + "  ".join(f"{t:.4f}" for t in times) + " s")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
