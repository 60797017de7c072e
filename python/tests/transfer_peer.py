"""The other process of test_two_process.py: a target agent that registers a patterned buffer,
prints its metadata, then waits (with a deadline) for the initiator's WRITE notification and
checks the bytes it wrote. Protocol on stdin/stdout, one line each:
  out: "<region id> <metadata hex>"     in: "<pattern byte>"  (what the initiator writes)
  out: "ok" once the written bytes arrived and match, or an error on stderr and exit 1.
"""
import sys

import kvferry

SIZE = 1 << 20


def main():
    backend = sys.argv[1]
    with kvferry.Agent(f"peer-{backend}", backend) as agent:
        buf = bytearray((i * 7 + 3) % 251 for i in range(SIZE))
        region = agent.register_memory(buf)
        print(region.id, agent.get_local_metadata().hex(), flush=True)
        pattern = int(sys.stdin.readline())
        got = agent.wait_notifications(timeout_ms=20_000)
        if [n.message for n in got] != [b"written"]:
            sys.exit(f"peer: expected the 'written' notification, got {got!r}")
        if buf[SIZE // 2:] != bytes([pattern]) * (SIZE // 2):
            sys.exit("peer: the written half does not hold the pattern")
        print("ok", flush=True)
        sys.stdin.readline()  # stay up until the initiator is done with us


if __name__ == "__main__":
    main()
