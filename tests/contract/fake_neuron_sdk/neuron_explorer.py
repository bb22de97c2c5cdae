"""FAKE `neuron-explorer` (contract tests only), the two documented commands the backend uses:

- `capture -n X.neff -s Y.ntff --profile-nth-exec=N` "runs" the fake NEFF and writes
  `Y_exec_N.ntff`, whose `total_time` (seconds) is the next value of `FAKE_NEURON_TIMES` (a comma
  list consumed in order across processes, state in `FAKE_NEURON_STATE`) or else the simulated
  latency the fake NEFF carries;
- `view -n X.neff -s Y.ntff --output-file DIR` processes the trace into Parquet tables, of which
  it writes the two the backend reads, fields named and typed as in Neuron Explorer's "Profile
  Parquet Schema Reference": `DIR/Summary.parquet`, one row (`total_time` float seconds, byte and
  flop counts int64, `*_percent` floats in percent), and `DIR/Instruction.parquet`, one row per
  instruction (`start_ts`, `end_ts`, `duration_ns` int64 ns, `engine`, `opcode`,
  `nki_source_location` "file.py:42").

Every call is appended to `FAKE_NEURON_LOG` (JSON lines). The numbers are not measurements.
"""

import json
import os
import sys
from pathlib import Path


def _log(entry):
    path = os.environ.get("FAKE_NEURON_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _next_scripted_time():
    script = os.environ.get("FAKE_NEURON_TIMES")
    state = os.environ.get("FAKE_NEURON_STATE")
    if not script or not state:
        return None
    times = [float(t) for t in script.split(",")]
    counter = Path(state)
    used = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(used + 1))
    return times[used % len(times)]


def _read_neff(path):
    if not path.is_file() or not path.read_text().startswith("FAKE-NEFF "):
        print(f"ERROR: cannot read NEFF {path}", file=sys.stderr)
        return None
    return json.loads(path.read_text()[len("FAKE-NEFF ") :])


def _options(argv, names):
    found = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if "=" in arg and arg.split("=", 1)[0] in names:
            key, value = arg.split("=", 1)
            found[key] = value
        elif arg in names and i + 1 < len(argv):
            found[arg] = argv[i + 1]
            i += 1
        else:
            return None
        i += 1
    return found


def capture(argv):
    opts = _options(argv, {"-n", "-s", "--profile-nth-exec"})
    if opts is None or "-n" not in opts or "-s" not in opts:
        print("usage: neuron-explorer capture -n FILE.neff -s FILE.ntff [--profile-nth-exec=N]", file=sys.stderr)
        return 2
    neff = _read_neff(Path(opts["-n"]))
    if neff is None:
        return 1
    nth = int(opts.get("--profile-nth-exec", "1"))
    ntff = Path(opts["-s"])
    written = ntff.with_name(f"{ntff.stem}_exec_{nth}{ntff.suffix}") if nth > 1 else ntff
    metrics = dict(neff["metrics"])
    metrics_lines = neff.get("lines", [])
    scripted = _next_scripted_time()
    if scripted is not None:
        metrics["total_time"] = scripted
    written.write_text(json.dumps({"fake_ntff": True, "metrics": metrics, "lines": metrics_lines}))
    _log({"tool": "capture", "neff": opts["-n"], "ntff": str(written), "nth": nth})
    return 0


def view(argv):
    opts = _options(argv, {"-n", "-s", "--output-file"})
    if opts is None or not {"-n", "-s", "--output-file"} <= set(opts):
        print("usage: neuron-explorer view -n FILE.neff -s FILE.ntff --output-file DIR", file=sys.stderr)
        return 2
    if _read_neff(Path(opts["-n"])) is None:
        return 1
    ntff = Path(opts["-s"])
    if not ntff.is_file():
        print(f"ERROR: cannot read NTFF {ntff}", file=sys.stderr)
        return 1
    trace = json.loads(ntff.read_text())
    metrics = trace["metrics"]

    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {}
    for key, value in metrics.items():
        kind = pa.int64() if isinstance(value, int) else pa.float64()
        columns[key] = pa.array([value], type=kind)
    columns["neuroncore_cycle_count"] = pa.array([int(metrics["total_time"] * 1.4e9)], type=pa.int64())
    out = Path(opts["--output-file"])
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), out / "Summary.parquet")
    rows = {"start_ts": [], "end_ts": [], "duration_ns": [], "engine": [], "opcode": [], "nki_source_location": []}
    clock = 0
    for path, line, engine, seconds in trace.get("lines", []):
        duration = round(seconds * 1e9)
        rows["start_ts"].append(clock)
        rows["end_ts"].append(clock + duration)
        rows["duration_ns"].append(duration)
        rows["engine"].append(engine)
        rows["opcode"].append("DMA_TRIGGER" if engine == "dma" else "FAKE_OP")
        rows["nki_source_location"].append(f"{Path(path).name}:{line}")
        clock += duration
    types = {"start_ts": pa.int64(), "end_ts": pa.int64(), "duration_ns": pa.int64()}
    pq.write_table(
        pa.table({k: pa.array(v, type=types.get(k, pa.string())) for k, v in rows.items()}),
        out / "Instruction.parquet",
    )
    _log({"tool": "view", "ntff": str(ntff), "output": str(out)})
    return 0


def main(argv):
    if argv and argv[0] == "capture":
        return capture(argv[1:])
    if argv and argv[0] == "view":
        return view(argv[1:])
    print("fake neuron-explorer: only `capture` and `view` are faked", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
